# gpt_text stopped and resumed (a preempted job): the checkpoint's identity holds only what makes
# the training trajectory so far (the model, the optimizer, the data order, the learning-rate rule),
# not the run's own settings. Run A stops after step 6 (--stop-after-steps, exit 3); started again
# with other run settings (--steps, --eval-windows, --prompt, --no-progress, --threads,
# --checkpoint-every) it resumes from the step-4 checkpoint and finishes, with the threads asked for
# (--threads is honoured). A changed --lr is refused naming it and the flag that accepts it
# (--accept-config-change, which gpt_text takes), and accepted with that flag. The corpus is a few
# kilobytes of text written here as byte-level token files (the format of edp/data/tokens.h).
# A run that stops at --steps between checkpoints commits its last step, and started again with
# the same --steps trains nothing more.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/data)
execute_process(COMMAND ${PYTHON} -c "
import struct, sys
text = ''.join('line %d: the quick brown fox jumps over the lazy dog. ' % i for i in range(120)).encode()
for name, part in (('train', text), ('val', text[:1500])):
    with open(sys.argv[1] + '/' + name + '.tok', 'wb') as f:
        f.write(b'EDPTOK01' + struct.pack('<IIQ', 1, 256, len(part)) + part)
" ${WORK}/data RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cannot write the token files (${rc})")
endif()
set(model --data ${WORK}/data --layers 1 --dim 32 --heads 2 --context 16 --batch 4 --lr 0.002
    --checkpoint-dir ${WORK}/ck)
function(run out_var)
  execute_process(COMMAND ${EXE} ${model} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 250)
  set(${out_var} "${rc}|${out}|${err}" PARENT_SCOPE)
endfunction()
# want_rc: an exit code, or "failure" for any other than 0.
function(expect res want_rc pattern what)
  string(FIND "${res}" "|" bar)
  string(SUBSTRING "${res}" 0 ${bar} rc)
  if(want_rc STREQUAL "failure")
    set(bad_rc FALSE)
    if(rc EQUAL 0)
      set(bad_rc TRUE)
    endif()
  elseif(NOT rc EQUAL want_rc)
    set(bad_rc TRUE)
  else()
    set(bad_rc FALSE)
  endif()
  if(bad_rc OR NOT res MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: expected exit ${want_rc} and output matching '${pattern}', got:\n${res}")
  endif()
endfunction()

run(a --steps 12 --checkpoint-every 4 --stop-after-steps 6 --eval-windows 8 --prompt A --no-progress --threads 2)
expect("${a}" 3 "stopping after step 6" "the stopped run")
# One thread as asked, where the job would otherwise take every core of the host (the layout's
# share: two on CI); gpt_text once ignored --threads.
run(b --steps 14 --checkpoint-every 2 --eval-windows 4 --prompt B --threads 1)
expect("${b}" 0 "resumed from [^\n]*ckpt-000000000004.edp: step 4" "the resume with other run settings")
expect("${b}" 0 "\"threads\": 1," "--threads 1")
expect("${b}" 0 "\"steps\": 14" "--steps 14")
file(REMOVE_RECURSE ${WORK}/ck)
run(c --steps 6 --checkpoint-every 3 --no-progress --threads 1)
expect("${c}" 0 "\"steps\": 6" "a fresh run")
string(REPLACE "--lr;0.002" "--lr;0.004" model "${model}")
run(d --steps 8 --no-progress --threads 1)
expect("${d}" failure "another configuration:[^|]*--lr: '0.002' in the checkpoint, '0.004' now[^|]*--accept-config-change"
  "a resume with another --lr")
run(e --steps 8 --no-progress --threads 1 --accept-config-change)
expect("${e}" 0 "resuming [^\n]* with a changed configuration, as asked" "a resume with --accept-config-change")

# --steps 7 with checkpoints every 3: the last step (7) is committed too; again: nothing to train.
file(REMOVE_RECURSE ${WORK}/ck)
string(REPLACE "--lr;0.004" "--lr;0.002" model "${model}")
run(f --steps 7 --checkpoint-every 3 --no-progress --threads 1)
expect("${f}" 0 "\"steps\": 7" "a run stopped at --steps 7")
if(NOT EXISTS ${WORK}/ck/ckpt-000000000007.edp)
  file(GLOB have ${WORK}/ck/*)
  message(FATAL_ERROR "the run stopped at --steps 7 did not commit step 7 (the directory holds: ${have})")
endif()
run(g --steps 7 --checkpoint-every 3 --no-progress --threads 1)
expect("${g}" 0 "the checkpoint is at step 7, --steps 7: nothing to train" "the same run started again")
expect("${g}" 0 "\"steps\": 7" "the same run started again")
