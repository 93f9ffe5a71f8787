"""keras_gresnet._cpu: the CPU a run folder records, and whether it has
bfloat16 units, read from /proc/cpuinfo's text."""

import os

from keras_gresnet._cpu import cpu_info

AMD = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
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
    """The model name, the bf16 units, and the generation where the file
    gives it (the family and model numbers, not the "model name")."""
    for text, model, bf16, ident in (
            (AMD, "AMD EPYC 9R14", True, "AuthenticAMD family 25 model 17"),
            (AVX2, "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", False, None),
            (AMX.replace("model name", "cpu family\t: 6\nmodel name"), "Intel Xeon Platinum 8488C",
             True, "? family 6 model ?")):
        path = tmp_path / "cpuinfo"
        path.write_text(text)
        info = cpu_info(str(path))
        assert info["model"] == model and info["bf16"] is bf16 and info["id"] == ident
        assert info["cores"] >= 1 and info["machine"]


def test_unreadable_cpuinfo_says_unknown_not_false(tmp_path):
    info = cpu_info(str(tmp_path / "missing"))
    assert info["bf16"] is None and info["model"] and info["id"] is None


def test_precision_note_says_when_a_mixed_policy_is_slower_here():
    """mixed_bfloat16 without bfloat16 units, or mixed_float16 on any CPU:
    one line naming the CPU; nothing for float32 or a CPU with the units."""
    from keras_gresnet import training

    if training.config.has_accelerator():
        assert training.precision_note("mixed_bfloat16") is None
        return
    avx2 = dict(model="Intel Xeon E5-2686 v4", machine="x86_64", cores=2, bf16=False)
    amx = dict(avx2, model="Intel Xeon 8488C", bf16=True)
    note = training.precision_note("mixed_bfloat16", avx2)
    assert note.startswith("note: mixed_bfloat16 on this CPU (Intel Xeon E5-2686 v4)")
    assert "\n" not in note and "bfloat16 units" in note
    assert training.precision_note("mixed_bfloat16", amx) is None
    assert training.precision_note("float32", avx2) is None
    assert "float16 arithmetic" in training.precision_note("mixed_float16", amx)
    unknown = dict(avx2, bf16=None)  # flags unreadable: say nothing
    assert training.precision_note("mixed_bfloat16", unknown) is None


def test_importing_the_package_turns_tensorflows_onednn_on_unless_told_otherwise():
    # TensorFlow enables oneDNN by itself on AVX-512 CPUs only; on an AVX2 CPU
    # without it a channels_first Conv2D is refused (tests/test_channels_first.py)
    import subprocess
    import sys

    code = "import os, keras_gresnet; print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'))"
    for given, expected in ((None, "1"), ("0", "0"), ("1", "1")):
        env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
        if given is not None:
            env["TF_ENABLE_ONEDNN_OPTS"] = given
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.split() == [expected], (given, out)
