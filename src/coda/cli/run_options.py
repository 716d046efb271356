"""The options shared by the commands that simulate (the trace, cluster and workload
options; the model and backfill options) and the RunConfig they make."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from coda.cli.deferred import CENSORED, FORMATS, FRACTIONAL, DeferredChoice
from coda.params import AsciiIntRange, FiniteFloat, OffOrFiniteFloat
from coda.policy.allocator_config import START_POINTS
from coda.policy.estimates import ESTIMATES
from coda.policy.options import (
    MAX_PERIOD_S,
    MIN_CONTROL_PERIOD_S,
    ORDERS,
    RECLAIMS,
    PolicyOptions,
)
from coda.sim.constants import GRANTS
from coda.study.config import (
    DEFAULT_CLUSTER,
    DEFAULT_LOAD,
    DEFAULT_TIME_LIMIT_S,
    DEFAULT_WARMUP,
    MAX_HORIZON_S,
    MAX_LOAD,
    MAX_SEED,
    RunConfig,
    SimulationOptions,
)

# Stated ranges of the numeric options (shown in --help; click checks them); the
# run's own ranges are checked where its options are built (coda.study.config).
MAX_SEEDS = 1000
MAX_WORKERS = 1024

F = TypeVar("F", bound=Callable[..., Any])  # a click command function, decorated in place


def trace_options(cluster: str = DEFAULT_CLUSTER) -> Callable[[F], F]:
    """The trace, cluster and workload options, with `cluster` as --cluster's default."""

    def decorate(f: F) -> F:
        return _add_trace_options(f, cluster)

    return decorate


def default_trace_options(f: F) -> F:
    return _add_trace_options(f, DEFAULT_CLUSTER)


def _add_trace_options(f: F, cluster: str) -> F:
    options = [
        click.option(
            "--trace",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help="Trace file. Default: the bundled Alibaba openb 2023 pod list.",
        ),
        click.option(
            "--format",
            "fmt",
            type=DeferredChoice(FORMATS),
            default=None,
            help="Trace format. Default: detected from the file's header.",
        ),
        click.option(
            "--cluster",
            default=cluster,
            show_default=True,
            help="'paper' (the paper's 80 servers of 28 cores, 400 GPUs), 'openb' (bundled "
            "node list), 'openb:F' (fraction F of it), a node-list CSV, or a spec like "
            "'48x8g96c,16x0g96c'.",
        ),
        click.option(
            "--load",
            type=FiniteFloat(0.0, MAX_LOAD, min_open=True),
            default=DEFAULT_LOAD,
            show_default=True,
            help="Rescale arrivals to this offered GPU load (x GPU capacity).",
        ),
        click.option(
            "--native-time",
            is_flag=True,
            help="Keep the trace's own arrival times (ignores --load).",
        ),
        click.option(
            "--seed",
            type=AsciiIntRange(0, MAX_SEED),
            default=0,
            show_default=True,
            help="Seeds the model draw, profile perturbation and sample noise.",
        ),
        click.option(
            "--profiles",
            default="coda",
            show_default=True,
            help="Performance profile set: coda, synergy, or a JSON file.",
        ),
        click.option(
            "--mix",
            default=None,
            help="DNN model mix, e.g. 'AlexNet=2,ResNet50=1'. Default: the profile set's.",
        ),
        click.option(
            "--skip-bad-rows",
            is_flag=True,
            help="Skip malformed trace rows (counted in the report) instead of failing.",
        ),
        click.option(
            "--fractional",
            type=DeferredChoice(FRACTIONAL),
            default="whole",
            show_default=True,
            help="Fractional-GPU jobs: give a whole GPU, or drop.",
        ),
        click.option(
            "--censored",
            type=DeferredChoice(CENSORED),
            default="keep",
            show_default=True,
            help="Jobs still running at the trace end: keep or drop.",
        ),
        click.option(
            "--horizon",
            type=FiniteFloat(0.0, MAX_HORIZON_S, min_open=True),
            default=None,
            help="Stop at this simulated time (s, from the trace's first arrival); "
            "later jobs count as unfinished. Default: run until every job finished.",
        ),
        click.option(
            "--warmup",
            type=FiniteFloat(0.0, 1.0, max_open=True),
            default=DEFAULT_WARMUP,
            show_default=True,
            help="Share of the first arrivals that only warm the cluster up: "
            "the measurement window starts after them.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def run_config(kw: dict[str, Any]) -> RunConfig:
    if kw.get("grants") == "fixed" and kw.get("reclaim", "shrink") != "requeue":
        # RunConfig refuses it too; said here in the options' own words.
        raise click.UsageError(
            "--grants fixed needs --reclaim requeue (a shrunk CPU job would keep its grant: "
            "Slurm never changes a running job's allocation)"
        )
    policy = PolicyOptions(
        estimates=kw.get("estimates", "exact"),
        default_time_limit_s=kw.get("default_time_limit", DEFAULT_TIME_LIMIT_S),
        order=kw.get("order", "drf"),
        gpu_subarrays=kw.get("gpu_subarrays", False),
        allocator_start=kw.get("allocator_start", "learned"),
        start_delay_s=kw.get("start_delay", 0.0),
        control_period_s=kw.get("control_period"),
        reclaim=kw.get("reclaim", "shrink"),
        settle_windows=kw.get("settle_windows", 0),
    )
    simulation = SimulationOptions(
        horizon=kw["horizon"],
        noise=kw.get("noise", 0.05),
        cycle_period_s=kw.get("cycle_period", 0.0),
        grants=kw.get("grants", "elastic"),
    )
    return RunConfig(
        trace=kw["trace"],
        format=kw["fmt"],
        cluster=kw["cluster"],
        load=None if kw["native_time"] else kw["load"],
        seed=kw["seed"],
        profiles=kw["profiles"],
        mix=kw["mix"],
        skip_bad_rows=kw["skip_bad_rows"],
        fractional=kw["fractional"],
        censored=kw["censored"],
        warmup=kw["warmup"],
        perturb=kw.get("perturb", 0.0),
        cpu_checkpoint_share=kw.get("cpu_checkpoint_share", 1.0),
        policy=policy,
        simulation=simulation,
    )


def model_options(f: F) -> F:
    """Measurement noise, profile perturbation and backfill's runtime estimates
    (simulate, compare)."""
    f = click.option(
        "--settle-windows",
        type=AsciiIntRange(0, 10),
        default=0,
        show_default=True,
        help="CODA's allocator leaves this many throughput windows out after each core "
        "change, as a node agent does that settles after a change (coda replay's twin: 1).",
    )(f)
    f = click.option(
        "--grants",
        type=click.Choice(GRANTS),
        default="elastic",
        show_default=True,
        help="What a running job's cpuset changes do to the books: elastic (CODA's node "
        "agent: cores the allocator narrows a job away from are free for the next job) or "
        "fixed (Slurm's: a job holds its grant until it ends; needs --reclaim requeue).",
    )(f)
    f = click.option(
        "--reclaim",
        type=click.Choice(RECLAIMS),
        default="shrink",
        show_default=True,
        help="How a DNN job takes back cores CPU jobs hold: shrink them (then preempt), or "
        "requeue them whole (as CODA on Slurm does); policies that never take cores back "
        "ignore it.",
    )(f)
    f = click.option(
        "--cycle-period",
        type=OffOrFiniteFloat(MIN_CONTROL_PERIOD_S, MAX_PERIOD_S),
        default=0.0,
        show_default=True,
        help="Run the scheduling cycle only every S seconds, as a periodic scheduler does "
        "(CODA's Slurm controller: 1 s); jobs wait for it holding nothing. 0: after every "
        "event. Otherwise at least 0.01.",
    )(f)
    f = click.option(
        "--control-period",
        type=FiniteFloat(MIN_CONTROL_PERIOD_S, MAX_PERIOD_S),
        default=None,
        help="CODA's control period in seconds: the eliminator's tick and the allocator's "
        "throughput window (a node agent's --window); policies without either ignore it.  "
        "[default: the eliminator's, 10 s]",
    )(f)
    f = click.option(
        "--start-delay",
        type=FiniteFloat(0.0, MAX_PERIOD_S),
        default=0.0,
        show_default=True,
        help="Seconds between placing a job and its starting to work, holding its GPUs and "
        "cores meanwhile (a real stack's launch; coda replay measures it).",
    )(f)
    f = click.option(
        "--allocator-start",
        type=click.Choice(START_POINTS),
        default="learned",
        show_default=True,
        help="Where CODA's core search starts: learned (its shape's learned count, at most "
        "the request), paper (the owner's largest earlier count for the model's category, "
        "else 3 CV / 5 NLP / 5 speech) or request (every job from its request, nothing "
        "learned carries over: CODA on Slurm when no two jobs share a name).",
    )(f)
    f = click.option(
        "--gpu-subarrays/--no-gpu-subarrays",
        default=False,
        show_default=True,
        help="Split CODA's GPU array into jobs of 4+ GPUs and of fewer.",
    )(f)
    f = click.option(
        "--order",
        type=click.Choice(ORDERS),
        default="drf",
        show_default=True,
        help="CODA's order inside each array: drf (tenants by dominant share, as the paper) "
        "or fifo.",
    )(f)
    f = click.option(
        "--default-time-limit",
        type=FiniteFloat(1.0, MAX_HORIZON_S),
        default=DEFAULT_TIME_LIMIT_S,
        show_default=True,
        help="With --estimates time-limits: the limit (seconds) of a job whose trace gives none.",
    )(f)
    f = click.option(
        "--estimates",
        type=click.Choice(ESTIMATES),
        default="exact",
        show_default=True,
        help="What backfill plans with: exact (the simulator's projection), time-limits "
        "(what Slurm knows: requested times, else --default-time-limit) or none (no "
        "backfill: strict FIFO per array).",
    )(f)
    f = click.option(
        "--cpu-checkpoint-share",
        type=FiniteFloat(0.0, 1.0),
        default=1.0,
        show_default=True,
        help="Share of CPU jobs that checkpoint (each drawn, seeded): a requeue keeps "
        "their work up to the last checkpoint; the rest lose their whole run.",
    )(f)
    f = click.option(
        "--perturb",
        type=FiniteFloat(0.0, 1.0, max_open=True),
        default=0.0,
        show_default=True,
        help="Scale every profile value by its own U(1-P, 1+P) draw (seeded).",
    )(f)
    return click.option(
        "--noise",
        type=FiniteFloat(0.0, 1.0),
        default=0.05,
        show_default=True,
        help="Relative noise of each throughput sample the allocator sees.",
    )(f)
