"""The ``keras-gresnet`` command line."""

import argparse
import os
import sys
import time


def _print_table(rows, columns, text_columns=1):
    """A plain-text table; the first ``text_columns`` left-aligned."""
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) for i, c in enumerate(columns)]
    line = "  ".join(f"{{:{'<' if i < text_columns else '>'}{w}}}" for i, w in enumerate(widths))
    print(line.format(*columns))
    print(line.format(*("-" * w for w in widths)))
    for row in rows:
        print(line.format(*row))


def cmd_list(args):
    """List the zoo's builders; with --build, build every paper configuration
    and print its depth, gates and parameter counts."""
    from keras_gresnet import zoo

    names = zoo.list_models(args.pattern)
    if not names:
        raise SystemExit(f"no model matches pattern={args.pattern!r}; try `keras-gresnet list`")
    if not args.build:
        for name in names:
            doc = (zoo.model_builder(name).__doc__ or "").strip().splitlines()[0]
            print(f"{name:20s} {doc}")
        return
    rows = []
    for name in names:
        for config in zoo.model_builder(name).paper_configs:
            start = time.perf_counter()
            model = zoo.get_model(name, **config)
            seconds = time.perf_counter() - start
            s = zoo.summarize(model)
            arguments = ", ".join(f"{k}={v!r}" for k, v in config.items())
            rows.append((name, arguments, model.name, s["depth"], s["gates"],
                         f"{s['params'] / 1e6:.3f}M", f"{seconds:.1f}s"))
            print(f"built {name}({arguments})", file=sys.stderr, flush=True)
            del model
    _print_table(rows, ("builder", "arguments", "model", "layers", "gates",
                        "params", "build"), text_columns=3)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-gresnet",
        description="Gated (GResNet) and pre-activation residual networks for Keras 3.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list the zoo's models")
    p.add_argument("pattern", nargs="?", default="*", help="shell wildcard, e.g. '*gresnet*'")
    p.add_argument("--build", action="store_true",
                   help="build every paper configuration and print layers, gates, params")
    p.set_defaults(func=cmd_list)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
