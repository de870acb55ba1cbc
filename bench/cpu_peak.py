"""The CPU's nominal peak, for the %peak columns of the CPU benchmarks (bench/cpu_vs_pytorch.sh,
bench/gpt_vs_pytorch.sh): threads x GHz x FLOPs per cycle per core.

FLOPs per cycle: float32 FMA on two vector units, 2 x lanes x 2 = 64 with AVX-512 (32 with AVX2
only; a core whose AVX-512 runs on 256-bit units, Zen 4 for one, has half of 64); bfloat16: 1024
with AMX (TDPBF16PS), else 128 (AVX512-BF16 dot products). GHz: PEAK_GHZ, default the "cpu MHz"
of /proc/cpuinfo, the nominal clock: a core that turbos above it can exceed "100 %".
"""
import os


def _cpuinfo():
    with open("/proc/cpuinfo") as f:
        return f.read()


def ghz():
    if os.environ.get("PEAK_GHZ"):
        return float(os.environ["PEAK_GHZ"])
    for line in _cpuinfo().splitlines():
        if line.startswith("cpu MHz"):
            return float(line.split(":")[1]) / 1000
    return float("nan")


def flops_per_cycle(precision="fp32"):
    flags = _cpuinfo()
    if precision == "bf16":
        return 1024 if "amx_bf16" in flags else 128
    return 64 if "avx512f" in flags else 32


def peak_gflops(threads, precision="fp32"):
    return threads * ghz() * flops_per_cycle(precision)


def describe():
    return (f"threads x {ghz():.2f} GHz x (fp32: {flops_per_cycle('fp32')}, bf16: {flops_per_cycle('bf16')}) "
            "FLOP/cycle (nominal clock, bench/cpu_peak.py)")
