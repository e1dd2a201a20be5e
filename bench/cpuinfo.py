"""cpuinfo.py - the machine line of the CPU benchmarks: model, family/model
numbers, cores and the SIMD flags the kernels dispatch on (issue 16 asks
every figure to name the CPU and its flags)."""
import os

FLAGS = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
         "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"]


def describe():
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
    except OSError:
        pass
    have = set(info.get("flags", "").split())
    on = [f for f in FLAGS if f in have]
    off = [f for f in FLAGS if f not in have]
    return (f"{info.get('model name', 'unknown CPU')} (family {info.get('cpu family', '?')}, "
            f"model {info.get('model', '?')}), {os.cpu_count()} cores; flags: {' '.join(on)}"
            + (f"; without: {' '.join(off)}" if off else ""))


if __name__ == "__main__":
    print(describe())
