"""keras_gresnet._cpu: the CPU a run folder records, and whether it has
bfloat16 units, read from /proc/cpuinfo's text."""

from keras_gresnet._cpu import cpu_info

AMD = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni
processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni
"""
AVX2 = """processor\t: 0
model name\t: Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz
flags\t\t: fpu sse4_2 avx avx2 fma
"""
AMX = "model name\t: Intel Xeon Platinum 8488C\nflags\t\t: avx512f amx_tile amx_bf16\n"


def test_model_name_and_bf16_units_from_cpuinfo(tmp_path):
    for text, model, bf16 in ((AMD, "AMD EPYC 9R14", True),
                              (AVX2, "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", False),
                              (AMX, "Intel Xeon Platinum 8488C", True)):
        path = tmp_path / "cpuinfo"
        path.write_text(text)
        info = cpu_info(str(path))
        assert info["model"] == model and info["bf16"] is bf16
        assert info["cores"] >= 1 and info["machine"]


def test_unreadable_cpuinfo_says_unknown_not_false(tmp_path):
    info = cpu_info(str(tmp_path / "missing"))
    assert info["bf16"] is None and info["model"]
