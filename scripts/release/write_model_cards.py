"""Write the model card of every published registry entry to
``zoo/cards/NAME.md`` (what ``keras-gresnet weights show NAME`` prints):

    python scripts/release/write_model_cards.py [--out zoo/cards]

``tests/test_weights.py`` checks that the committed cards are these.
"""

import argparse
from pathlib import Path

from keras_gresnet import files, weights

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=ROOT / "zoo" / "cards", type=Path)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    entries = [e for e in weights.list_weights() if e["status"] == weights.PUBLISHED]
    for entry in entries:
        files.write_text(args.out / f"{entry['name']}.md", weights.model_card(entry))
    print(f"{len(entries)} model cards in {args.out}")


if __name__ == "__main__":
    main()
