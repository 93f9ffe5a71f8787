"""Every Python snippet of the README and of ``docs/`` runs as written.

Each ```` ```python ```` block is extracted and executed in a folder that
holds what a reader has by then: a folder of pictures ``pets/`` (two
classes), ``runs/main/model.keras`` (``make run``'s file: here a small zoo
net, saved the same way), and the names a snippet leaves to the reader
(``model``, ``x``, ``y``, ``images``, ``uint8_images``). A snippet that needs
what no test machine has (an account, a download) is listed in
:data:`ELSEWHERE` with the test that runs its calls offline.
"""

import re
from pathlib import Path

import keras
import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

# (page, block index): (the test file that runs the same calls offline, a
# name that file must use), for snippets that need the network.
ELSEWHERE = {
    ("docs/hub.md", 0): ("tests/test_hub.py", "upload_preset"),  # a Hugging Face account
    ("docs/models.md", 1): ("tests/test_convert.py", "zoo.gresnet50v2("),  # ImageNet
}


def _snippets():
    for page in PAGES:
        for index, match in enumerate(BLOCK.finditer(page.read_text())):
            yield str(page.relative_to(ROOT)), index, match.group(1)


SNIPPETS = list(_snippets())


def test_every_page_with_python_has_its_snippets_found():
    """The extraction finds the blocks (a change of fence would hide them)."""
    pages = {page for page, _, _ in SNIPPETS}
    assert {"README.md", "docs/weights.md", "docs/images.md", "docs/models.md"} <= pages
    assert set(ELSEWHERE) <= {(page, index) for page, index, _ in SNIPPETS}
    for (page, index), (test_file, name) in ELSEWHERE.items():
        assert name in dict(((p, i), c) for p, i, c in SNIPPETS)[(page, index)]
        assert name in (ROOT / test_file).read_text(), (page, index, test_file)


@pytest.fixture
def reader_folder(tmp_path, monkeypatch):
    """A working folder holding what the snippets assume, and the names they
    leave to the reader."""
    from keras_gresnet import zoo

    rng = np.random.default_rng(0)
    for name, value in (("cat", 40), ("dog", 200)):
        (tmp_path / "pets" / name).mkdir(parents=True)
        for i in range(5):
            pixels = np.clip(rng.normal(value, 20, (28, 28)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels, "L").save(tmp_path / "pets" / name / f"{i}.png")
    (tmp_path / "runs" / "main").mkdir(parents=True)
    zoo.gresnet_mlp(depth=2).save(tmp_path / "runs" / "main" / "model.keras")
    monkeypatch.chdir(tmp_path)
    images = rng.integers(0, 256, (6, 28, 28, 1)).astype(np.uint8)
    return dict(
        model=zoo.gresnet_mlp(depth=20),
        x=images.reshape(6, -1).astype(np.float32) / 255, y=np.arange(6) % 3,
        images=images.reshape(6, -1).astype(np.float32) / 255, uint8_images=images,
    )


@pytest.mark.integration
@pytest.mark.parametrize("page, index, code", [
    pytest.param(page, index, code, id=f"{page}-{index}")
    for page, index, code in SNIPPETS if (page, index) not in ELSEWHERE])
def test_snippet_runs_as_written(page, index, code, reader_folder):
    namespace = dict(reader_folder)
    exec(compile(code, f"{page} (python block {index})", "exec"), namespace)
    keras.backend.clear_session(free_memory=False)


# A shell snippet's placeholders, and what stands for them.
PLACEHOLDERS = {"NAME": "gresnet_mlp20_mnist", "[NAME]": None}
SHELL = re.compile(r"^```(?:bash|sh|console)\n(.*?)^```", re.S | re.M)


def _commands():
    """Every ``keras-gresnet`` command of the shell snippets, as argv."""
    import shlex

    for page in PAGES:
        for block in SHELL.findall(page.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                if not re.match(r"^\s*([A-Z_]+=\S+\s+)*keras-gresnet\b", line):
                    continue
                words = shlex.split(line, comments=True)
                while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value before it
                    words.pop(0)
                if words[:1] == ["keras-gresnet"]:
                    argv = [PLACEHOLDERS.get(w, w) for w in words[1:]]
                    yield str(page.relative_to(ROOT)), [w for w in argv if w is not None]


COMMANDS = list(_commands())


def test_every_command_line_in_the_docs_parses(capsys):
    """Pasted as written, each ``keras-gresnet`` line of the docs is accepted
    by the parser (and ``train``'s free options split into recipe fields and
    the builder's arguments), and names a model the zoo has."""
    from keras_gresnet import cli, zoo

    assert len(COMMANDS) >= 20
    parser = cli.build_parser()
    for page, argv in COMMANDS:
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit:
            pytest.fail(f"{page}: keras-gresnet {' '.join(argv)}: {capsys.readouterr().err}")
        if args.command == "train":
            assert args.model in zoo.list_models(), (page, argv)
            cli.split_options(cli.parse_extra(extra))
        elif args.command != "list":
            assert not extra, (page, argv, extra)
        if argv[:1] == ["list"] or argv[:2] == ["weights", "list"]:  # instant: run them
            assert cli.main(argv) == 0, (page, argv, capsys.readouterr().err)
            assert capsys.readouterr().out.strip(), (page, argv)
