"""What every reproduction script shares: train a planned run into its
folder unless it finished (a diverged run counts as finished: a result
too), resume it where it stopped, and summarise test errors over seeds.
Public APIs only (``keras_gresnet.training``). Used by
``reproduce_gr_mnist.py`` (GR's MLPs) and ``reproduce_gr_conv.py`` (GR's
CIFAR nets on the MNIST family)."""

import math
import statistics

from keras_gresnet import training


def train_run(folder, model, *, model_kwargs, seed, **train_kwargs):
    """Train ``model`` into ``folder``, or resume it; a finished run is left
    as it is. Returns its results (``{"diverged": ...}`` for a run whose
    loss became NaN)."""
    results = training.read_results(folder)
    if results is not None:
        print(f"done already: {folder}", flush=True)
        return results
    print(f"training {model} {model_kwargs} seed={seed} -> {folder}", flush=True)
    try:
        run = training.train(model, model_kwargs=model_kwargs, seed=seed, out=folder,
                             verbose=2, **train_kwargs)
        return run.results
    except training.TrainingDiverged as error:
        print(f"diverged: {error}", flush=True)
        results = dict(diverged=str(error))
        training.write_results(folder, results)
        return results


def add_run_options(parser, collected):
    """The options every reproduction script takes: where the data and the
    results are, a smoke-run subset, and ``--no-train`` (only collect the
    finished runs into ``collected``)."""
    parser.add_argument("--data-dir")
    parser.add_argument("--max-train-examples", type=int,
                        help="a seeded subset of the training set (smoke runs)")
    parser.add_argument("--max-test-examples", type=int,
                        help="a seeded subset of the test set (smoke runs; the tables say so)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--no-train", action="store_true",
                        help=f"only collect finished runs into the {collected}")


def summary(values):
    """``"m"`` for one value, ``"mean ± std (n=k)"`` for more, ``"-"`` for none."""
    values = [v for v in values if v != ""]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return (f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f} "
            f"(n={len(values)})")


def welch(a, b):
    """Welch's t of ``mean(a) - mean(b)`` and its degrees of freedom
    (Welch-Satterthwaite); ``None`` with fewer than 2 values a side or no
    spread."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return None
    t = (statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return t, dof


def _t_cdf(x, dof, steps=4000):
    """Student's t CDF at ``x >= 0`` (Simpson's rule on the density; error
    far below the 2 decimals an interval is printed with)."""
    log_c = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)

    def density(t):
        return math.exp(log_c - (dof + 1) / 2 * math.log1p(t * t / dof))

    h = x / steps
    total = density(0) + density(x) + sum(
        (4 if i % 2 else 2) * density(i * h) for i in range(1, steps))
    return 0.5 + total * h / 3


def t_quantile(p, dof):
    """The ``p`` quantile (``p >= 0.5``) of Student's t with ``dof`` degrees
    of freedom, by bisection of :func:`_t_cdf`."""
    lo, hi = 0.0, 1000.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf(mid, dof) < p else (lo, mid)
    return (lo + hi) / 2


def welch_interval(a, b, level=0.95):
    """``(gap, low, high)``: ``mean(a) - mean(b)`` and its Welch confidence
    interval at ``level``; ``None`` where :func:`welch` is."""
    test = welch(a, b)
    if test is None:
        return None
    t, dof = test
    gap = statistics.fmean(a) - statistics.fmean(b)
    half = t_quantile(0.5 + level / 2, dof) * abs(gap / t) if t else 0.0
    return gap, gap - half, gap + half


def paired_interval(a, b, level=0.95):
    """``(mean difference, low, high)`` of the paired differences ``a[i] -
    b[i]`` (two measures of the same nets) and Student's interval at
    ``level`` with ``n - 1`` degrees of freedom; ``None`` with fewer than 2
    pairs; ``low == high`` where every pair differs by the same amount."""
    if len(a) != len(b):
        raise ValueError(f"paired values need as many a as b, got {len(a)} and {len(b)}")
    if len(a) < 2:
        return None
    differences = [x - y for x, y in zip(a, b)]
    mean = statistics.fmean(differences)
    half = t_quantile(0.5 + level / 2, len(a) - 1) * statistics.stdev(differences) / \
        math.sqrt(len(a))
    return mean, mean - half, mean + half
