# Run by CTest: install edp, then use only the install, as a user of it would:
#  1. build examples/consumer against it with find_package(edp): the README's first program
#     (examples/consumer/main.cpp) on edp::edp, and the CNN example's source on edp::models;
#  2. run the first program for one epoch (test accuracy >= 0.75: the 784-256-10 MLP reaches
#     ~0.84 after one epoch; 0.75 leaves room for the thread count's rounding, far above chance),
#     the out-of-tree CNN's --help, and an installed example's --help;
#  3. a user's own data and model (examples/consumer/*.cpp, shown in the README): NumPy itself
#     writes X.npy (float64 [1000, 4]) and y.npy (float64 [1000], y = sin x0 + x1 x2 / 2 - 0.3 x3
#     + noise of sd 0.05, variance ~0.74); regression trains on them (its mse must be below 0.1:
#     the 4-32-1 tanh MLP reaches ~0.01 in 20 epochs, predicting the mean gives ~0.74) and saves
#     model.edp; inference, a separate program, loads it and must print the same mse to the last
#     digit; custom_layer must pass its gradient check and lower its mse; ddp runs on 2 and 3
#     ranks with training sets (29953 and 1001 samples) whose last step leaves a rank without
#     samples, and must finish (before DistributedLoader the README's snippet hung there);
#  4. run the installed job spec share/edp/specs/mlp_small.json through the installed
#     edp-autoscale (submit, serve until idle, status): its command names an installed program
#     found on PATH, which holds only the install's bin/ before the system's.
# A build without CUDA: the consumer is configured with the CUDA toolkit made unfindable, and its
# programs must link no CUDA library.
# Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR, HAVE_CUDA, MPIEXEC.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
set(P ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${P})
set(no_cuda)
if(NOT HAVE_CUDA)
  set(no_cuda -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${P} -DCMAKE_BUILD_TYPE=Release ${no_cuda})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
if(NOT HAVE_CUDA)
  foreach(exe first_program regression ddp_program)
    run(readelf -d ${WORK_DIR}/build/${exe})
    if(out MATCHES "lib(cuda|cudart|cublas|cudnn|nccl)[^ ]*\\.so")
      message(FATAL_ERROR "${exe} of a CPU-only install links a CUDA library:\n${out}")
    endif()
  endforeach()
endif()

run(${WORK_DIR}/build/first_program --epochs 1)
if(NOT out MATCHES "epoch 0: test accuracy 0\\.([0-9][0-9])")
  message(FATAL_ERROR "the first program printed no accuracy:\n${out}")
endif()
if(CMAKE_MATCH_1 LESS 75)
  message(FATAL_ERROR "the first program reached test accuracy 0.${CMAKE_MATCH_1} after one epoch, expected >= 0.75")
endif()
foreach(exe ${WORK_DIR}/build/cnn_example ${P}/bin/fashion_mnist_mlp ${P}/bin/elastic_mnist)
  run(${exe} --help)
  if(NOT out MATCHES "usage: ")
    message(FATAL_ERROR "${exe} --help printed no usage:\n${out}")
  endif()
endforeach()

# ---- a user's NumPy data: regression, inference, a custom layer ----
set(D ${WORK_DIR}/npdata)
file(MAKE_DIRECTORY ${D})
set(py)
foreach(cand /usr/bin/python3 python3)
  execute_process(COMMAND ${cand} -c "import numpy" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    set(py ${cand})
    break()
  endif()
endforeach()
if(NOT py)
  message(FATAL_ERROR "no python3 with NumPy (scripts/setup.sh installs python3-numpy)")
endif()
run(${py} -c "import numpy as np
rng = np.random.default_rng(0)
X = rng.normal(size=(1000, 4))
y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] - 0.3 * X[:, 3] + 0.05 * rng.normal(size=1000)
np.save('${D}/X.npy', X)
np.save('${D}/y.npy', y)")
run(${WORK_DIR}/build/regression --data ${D} --out ${D}/model.edp)
if(NOT out MATCHES "after 20 epochs: mse ([0-9.]+)  mae")
  message(FATAL_ERROR "regression printed no mse:\n${out}")
endif()
set(train_mse ${CMAKE_MATCH_1})
if(NOT train_mse LESS 0.1)
  message(FATAL_ERROR "regression reached mse ${train_mse}, expected < 0.1 (the mean predictor's is ~0.74)")
endif()
run(${WORK_DIR}/build/inference --data ${D} --model ${D}/model.edp)
if(NOT out MATCHES "over 1000 samples: mse ([0-9.]+)  mae" OR NOT CMAKE_MATCH_1 STREQUAL train_mse)
  message(FATAL_ERROR "inference with the saved model printed another mse than training (${train_mse}):\n${out}")
endif()
run(${WORK_DIR}/build/custom_layer --data ${D})
if(NOT out MATCHES "gradcheck: ok" OR NOT out MATCHES "before training: mse ([0-9.]+)")
  message(FATAL_ERROR "custom_layer:\n${out}")
endif()
set(before ${CMAKE_MATCH_1})
if(NOT out MATCHES "after 10 epochs: mse ([0-9.]+)" OR NOT CMAKE_MATCH_1 LESS before)
  message(FATAL_ERROR "custom_layer did not lower its mse:\n${out}")
endif()

# ---- data-parallel training with a rank left without samples in the last step ----
foreach(case "2;29953;235" "3;1001;6")
  list(GET case 0 np)
  list(GET case 1 limit)
  list(GET case 2 steps)
  run(timeout 300 ${MPIEXEC} -np ${np} --oversubscribe ${WORK_DIR}/build/ddp_program --limit ${limit})
  if(NOT out MATCHES "epoch 0: ${steps} steps on ${np} rank\\(s\\), test accuracy 0\\.[0-9]+")
    message(FATAL_ERROR "ddp on ${np} ranks with ${limit} samples:\n${out}")
  endif()
endforeach()

set(ENV{PATH} "${P}/bin:$ENV{PATH}")
set(ROOT ${WORK_DIR}/serve)
run(${P}/bin/edp-autoscale submit --root ${ROOT} ${P}/share/edp/specs/mlp_small.json)
run(${P}/bin/edp-autoscale serve --root ${ROOT} --slots 2 --policy dp --exit-when-idle --quiet)
run(${P}/bin/edp-autoscale status --root ${ROOT} --json)
string(JSON state GET "${out}" jobs 0 state)
string(JSON code GET "${out}" jobs 0 exit_code)
if(NOT state STREQUAL "done" OR NOT code EQUAL 0)
  file(READ ${ROOT}/jobs/j0001/log log)
  message(FATAL_ERROR "the installed spec's job ended ${state} (exit ${code}):\n${log}")
endif()
