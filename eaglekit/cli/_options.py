"""Options shared by several commands, defined once so every command spells and documents them alike."""

from __future__ import annotations

import functools

import click

from .. import dialects
from ..errors import UsageError
from ..io import dtypes
from ..model.drafter import NORM_OUTPUT_SEMANTICS

# -- option types: parse and check once, where the option is read; a bad value is a one-line usage error (exit 2)


class DialectType(click.ParamType):
    """A dialect name or alias (``writable``: one eaglekit can write); ``auto`` where detection may decide."""

    name = "dialect"

    def __init__(self, *, writable: bool = False, auto: bool = False):
        self.writable, self.auto = writable, auto

    def convert(self, value, param, ctx):
        if value is None or (self.auto and value == "auto"):
            return value
        return (dialects.get_writer(value) if self.writable else dialects.get(value)).name


class EngineSpecType(click.ParamType):
    """``ENGINE==VERSION`` for which eaglekit has rules (checked now, used as written)."""

    name = "engine"

    def convert(self, value, param, ctx):
        if value is not None:
            from .. import engines  # the engine rules load only when an engine is named

            engines.parse(value)
        return value


class AuxIdsType(click.ParamType):
    """Comma-separated target layer ids: ``2,16,29``."""

    name = "ids"

    def convert(self, value, param, ctx):
        return value if isinstance(value, tuple) else parse_ids(value)


class NormOutputSemanticsType(click.ParamType):
    """How to read a ``norm_output`` key whose meaning depends on the producer: ``auto``, ``eagle31``, ``specforge``."""

    name = "semantics"
    choices = ("auto", *NORM_OUTPUT_SEMANTICS)

    def convert(self, value, param, ctx):
        if value is None or value in self.choices:
            return value
        raise UsageError(f"--norm-output-semantics {value!r}: expected one of {', '.join(self.choices)}")


class DeviceType(click.ParamType):
    """Where verify runs: cpu, cuda, cuda:N or auto (checked before anything loads)."""

    name = "device"

    def convert(self, value, param, ctx):
        if value in ("cpu", "cuda", "auto") or (
            isinstance(value, str) and value.startswith("cuda:") and value[5:].isdigit()
        ):
            return value
        raise UsageError(f"--device {value!r}: one of cpu, cuda, cuda:N, auto")


DEVICE = DeviceType()


class AgainstType(click.ParamType):
    """``vllm`` (the vLLM importable beside eaglekit), ``vllm==X`` or ``llama.cpp==bN`` (that release's engine
    environment)."""

    name = "against"

    def convert(self, value, param, ctx):
        if value is None or value == "vllm":
            return value
        from ..engines import envs

        envs.env_dir(value)  # checks the spec's form
        return value


class FiniteFloat(click.FloatRange):
    """A float range that also refuses nan and inf, which every comparison passes or fails in silence (a threshold of
    nan failed a finished run with "1.000 < nan"; a temperature of nan gave NaN figures and non-standard JSON)."""

    name = "finite float"

    def convert(self, value, param, ctx):
        import math

        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number

    def _describe_range(self) -> str:
        """No range in --help where there is none (click's FloatRange would print ``[x<=None]``)."""
        return super()._describe_range() if self.min is not None or self.max is not None else ""


class NamedPlaceType(click.ParamType):
    """A path (``hub``: or a Hub id; ``what``: something else named) that may not be empty: ``--target ''`` (or
    ``--prompts ''``, ``--compare ''``, ``--revision ''``) was read as not given at all, and an empty PATH or OUT as the
    current directory."""

    name = "path"

    def __init__(self, *, hub: bool = False, what: str | None = None):
        self.hub = hub
        self.what = what or ("a path or a Hub id" if hub else "a path")

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            where = (
                param.opts[0]
                if isinstance(param, click.Option)
                else (param.metavar or param.name.upper())
                if param
                else "a value"
            )
            raise UsageError(f"{where}: empty; give {self.what}")
        return value


class HubIdType(click.ParamType):
    """A Hub repo id (``namespace/name``) a drafter may record: never a path on this machine."""

    name = "hub id"

    def convert(self, value, param, ctx):
        from ..serving import hub_id_problem

        problem = hub_id_problem(value) if isinstance(value, str) else None
        if problem:
            self.fail(f"{value!r} is not a Hub repo id: {problem}", param, ctx)
        return value


AGAINST = AgainstType()
HUB_ID = HubIdType()
TARGET_ENGINE = AgainstType()
NAMED_PLACE = NamedPlaceType(hub=True)  # a drafter or a target
NAMED_FILE = NamedPlaceType(hub=False)  # a file or folder of this machine
NAMED_REVISION = NamedPlaceType(what="a branch, tag or commit")
DIALECT = DialectType(auto=True)
WRITABLE_DIALECT = DialectType(writable=True)
ENGINE_SPEC = EngineSpecType()
AUX_IDS = AuxIdsType()
NORM_OUTPUT_SEMANTICS_TYPE = NormOutputSemanticsType()

revision_option = click.option(
    "--revision",
    metavar="REV",
    type=NAMED_REVISION,
    help="For a Hub id (org/name): the branch, tag or commit to read (default main; org/name@REV says the same).",
)
download_option = click.option(
    "--download",
    is_flag=True,
    help=(
        "For a Hub id: download the files into the Hub cache (so checks that need tensor values run) instead of "
        "reading headers only by HTTP range requests."
    ),
)
json_option = click.option("--json", "json_mode", is_flag=True, help="Print the result as JSON (schema in schemas/).")
force_option = click.option(
    "--force",
    is_flag=True,
    help="Replace OUT if it is empty or an earlier eaglekit output (never a directory with other files).",
)
target_option = click.option(
    "--target",
    metavar="MODEL",
    type=NAMED_PLACE,
    help=(
        "The target (verifier) model: a local directory, a Hub id in the local cache, a .gguf file, or its config.json"
        " alone (only the config is read)."
    ),
)
engine_option = click.option(
    "--engine",
    type=ENGINE_SPEC,
    metavar="ENGINE==VERSION",
    help="Judge the drafter as this engine release would load and run it, e.g. vllm==0.24.",
)
dtype_option = click.option(
    "--dtype",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", *dtypes.CAST_TARGETS]),
    help="Cast floating tensors (never d2t/t2d); auto keeps each tensor's own dtype.",
)


# verify and drift: where and in which float type the target and the reference drafter run
device_option = click.option(
    "--device", type=DEVICE, default="cpu", show_default=True, help="cpu, cuda, cuda:N or auto."
)
run_dtype_option = click.option(
    "--dtype",
    default="float32",
    show_default=True,
    type=click.Choice(list(dtypes.CAST_TARGETS)),
    help="The float type the target and the drafter run in.",
)

# verify and drift: what a prompts file holds and how each kind of line becomes tokens (io.prompts_file)
PROMPTS_HELP = (
    "one JSON object per line: prompt (one user turn under the target's chat template, as a chat request sends it),"
    " text (raw text, tokenized as a completion request is: no chat template), messages (a conversation under the chat"
    " template) or input_ids (the tokens themselves)"
)
raw_prompts_option = click.option(
    "--raw-prompts",
    is_flag=True,
    help='Take each {"prompt": ...} line as raw text, as {"text": ...} is: no chat template.',
)
num_prompts_option = click.option("--num-prompts", type=click.IntRange(min=1), help="Use only the first N prompts.")


def max_new_tokens_option(*, default: int, help: str):
    """``--max-new-tokens``: the greedy continuation's length (verify and capture 64, drift 32)."""
    return click.option("--max-new-tokens", type=click.IntRange(min=1), default=default, show_default=True, help=help)


def num_speculative_tokens_option(help: str = "K, the drafted chain length."):
    """``--num-speculative-tokens`` (the parameter ``k``), default 3 as vLLM's examples serve it."""
    return click.option(
        "--num-speculative-tokens", "k", type=click.IntRange(min=1), default=3, show_default=True, help=help
    )


threads_option = click.option(
    "--threads",
    type=click.IntRange(min=1),
    metavar="N",
    help=(
        "CPU threads for torch (verify, drift; convert with --resolve or --dtype). Default: the cores this process may"
        " use that other processes leave at least half free, measured while it starts (on a busy machine fewer threads"
        " are faster: each product waits for its slowest thread). EAGLEKIT_NUM_THREADS sets it too; an OMP_NUM_THREADS"
        " you set is left to torch. verify's and drift's reports say what was used (resources)."
    ),
)
batch_size_option = click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    metavar="N",
    help=(
        "Prompts the target decodes together. Default: as many as a quarter of the memory available holds (their KV"
        " cache and states), up to 64; the report's resources say what was used."
    ),
)

norm_output_option = click.option(
    "--norm-output-semantics",
    type=NORM_OUTPUT_SEMANTICS_TYPE,
    default="auto",
    show_default=True,
    metavar="auto|eagle31|specforge",
    help=(
        "How to read norm_output in a SpecForge-style (sglang) config, where the checkpoint cannot tell: eagle31 = the"
        " post-norm state feeds the next step; specforge = SpecForge 0.2.0's (false: lm_head reads the un-normalised"
        " state; pre-norm feedback either way); auto = as the checkpoint records, else eagle31 with a warning."
    ),
)


def from_option(func):
    return click.option(
        "--from",
        "source_dialect",
        type=DIALECT,
        default="auto",
        show_default=True,
        metavar="DIALECT",
        help=f"Source dialect ({', '.join(dialects.names())}); auto detects it.",
    )(func)


def parse_ids(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    items = text.replace(" ", "").split(",")
    if items == [""]:
        raise UsageError("--aux-layers: no layer ids given")
    # an empty item (1,,2) is a typo, not one id fewer: vLLM would capture layers nobody chose
    if not all(p.isascii() and p.removeprefix("-").isdigit() for p in items):
        raise UsageError(f"--aux-layers {text!r}: expected comma-separated integers like 2,16,29")
    ids = tuple(int(p) for p in items)
    if any(i < 0 for i in ids):  # input-of-layer ids: 0 is the embeddings' output, nothing comes before it
        raise UsageError(f"--aux-layers {text!r}: layer ids are 0 or more (vLLM's input-of-layer convention)")
    return ids


# -- the target served by vLLM (verify, drift, capture) and vLLM's workers (also for verify --against)

vllm_python_option = click.option(
    "--vllm-python",
    metavar="PATH",
    type=NAMED_FILE,
    help=(
        "Run vLLM with this Python (any environment with vLLM, e.g. CUDA vLLM), for --target-engine and --against;"
        " its release is read from its packages."
    ),
)


def target_engine_option(*, default: str | None = None):
    return click.option(
        "--target-engine",
        type=TARGET_ENGINE,
        metavar="vllm|vllm==X",
        default=default,
        show_default=default is not None,
        help=(
            "Run the target in vLLM, never in eaglekit's process (which reads only its config, tokenizer and the"
            " tensors a drafter borrows): the vLLM installed beside eaglekit, or release X's engine environment"
            " (`eaglekit engines install vllm==X`). Its states are captured by vLLM's own extract_hidden_states."
        ),
    )


_PARALLEL_OPTIONS = (
    click.option(
        "--tensor-parallel-size",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        metavar="N",
        help="vLLM's tensor parallel workers for the target (on a CPU: one core each, bound by eaglekit).",
    ),
    click.option(
        "--pipeline-parallel-size",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        metavar="N",
        help="vLLM's pipeline parallel stages (refused where the release cannot run them, before any engine starts).",
    ),
    click.option(
        "--data-parallel-size",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        metavar="N",
        help="vLLM engines capturing the target side by side, the prompts dealt out among them (--target-engine).",
    ),
    click.option(
        "--distributed-executor-backend",
        type=click.Choice(["mp", "ray"]),
        help="How vLLM starts its workers: mp (one machine; the default for several) or ray (a cluster; GPUs only).",
    ),
    click.option(
        "--ray-address",
        metavar="ADDRESS",
        help="With --distributed-executor-backend ray: the cluster to join (else RAY_ADDRESS, else a local one).",
    ),
)


def parallel_options(func):
    """The parallel options, handed to the command as one ``parallel`` argument (``engines.vllm_scale.Parallel``)."""

    @functools.wraps(func)
    def command(
        *args,
        tensor_parallel_size,
        pipeline_parallel_size,
        data_parallel_size,
        distributed_executor_backend,
        ray_address,
        **kwargs,
    ):
        from ..engines.vllm_scale import Parallel

        parallel = Parallel(
            tensor_parallel_size, pipeline_parallel_size, data_parallel_size, distributed_executor_backend, ray_address
        )
        return func(*args, parallel=parallel, **kwargs)

    for option in reversed(_PARALLEL_OPTIONS):
        command = option(command)
    return command
