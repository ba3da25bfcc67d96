"""The drift report's plots, as matplotlib figures (imported only here, and only when plotting).

Rules every figure keeps, so that a reader does not have to guess: a title naming the drafter (and the one compared)
and the target; both axes labelled, the quantity with its unit or meaning; categorical axes (draft step, context
bucket, aux chunk, prompt variant) ticked at their categories only, never at fractions; one colour per drafter in every
figure (what else a line means is its style: solid or dashed, said in the legend); shares and probabilities on a
0..1 axis; and a caption for the page (``CAPTIONS``) that says what is plotted. ``tests/test_drift.py`` checks these
on the figure objects.
"""

from __future__ import annotations

from pathlib import Path

# one colour per drafter, the same in every figure (matplotlib's first two: blue for the drafter, orange for --compare)
SIDE_STYLE = (
    {"color": "tab:blue", "marker": "o"},
    {"color": "tab:orange", "marker": "s", "markerfacecolor": "none"},  # hollow: a value equal to the drafter's shows
)
PER_DEPTH, BY_CONTEXT, FC_INPUT = "per_depth.png", "by_context_length.png", "fc_input.png"
VARIANTS, SAMPLING = "variants.png", "sampling.png"
CAPTIONS = {
    PER_DEPTH: (
        "Per draft step k: the share of chains whose k-th draft is accepted; the drafter's attention on the first"
        " positions (sinks, solid) and on the chain's own drafts (dashed); the norm of the state fed to step k+1,"
        " relative to step 1's. EAGLE 3.1's diagnosis: attention drifts from the sinks onto the drafts and the fed-back"
        " norm grows with depth."
    ),
    BY_CONTEXT: (
        "Acceptance length over every position, by where the chain starts in the sequence (its absolute position,"
        " bucketed). A drafter that loses acceptance at long context shows falling bars."
    ),
    FC_INPUT: (
        "The mean norm of each fused target state (aux chunk, in ascending target layer) as it enters fc, after"
        " input_norm / fc_norm. Balanced chunks are of like height."
    ),
    VARIANTS: (
        "Acceptance length (as a greedy vLLM run counts it) of the same inputs under each prompt framing, each with its"
        " own greedy continuation: the spread is how much the framing alone moves it."
    ),
    SAMPLING: (
        "Per draft step: the expected share of chains whose k-th draft vLLM's rejection sampler accepts at the"
        " temperature shown (solid), beside greedy acceptance on the same chains (dashed)."
    ),
}


def short(name: str) -> str:
    """A drafter or target as a title names it: a local path by its last part (a machine's folders say nothing to a
    reader, and make titles run off the figure), a Hub id whole."""
    path = Path(name)
    return path.name if path.exists() or name.startswith(("/", "./", "~")) else name


def title(r: dict) -> str:
    """Whose figures these are: the drafter, the one compared, the target (on a line of its own where one line would
    run off a narrow figure)."""
    sides = [f"{short(r['drafter'])} (EAGLE {r['eagle_version']})"]
    if r.get("compare"):
        sides.append(f"{short(r['compare']['path'])} (EAGLE {r['compare']['eagle_version']})")
    drafters, target = " vs ".join(sides), f"on {short(r['target'])}"
    return f"{drafters} {target}" if len(drafters) + len(target) < 70 else f"{drafters}\n{target}"


def sides(r: dict) -> list[tuple[str, dict, dict]]:
    """(legend label, report side, line style) for the drafter and, with --compare, the other one."""
    out = [(short(r["drafter"]), r, SIDE_STYLE[0])]
    if r.get("compare"):
        out.append((short(r["compare"]["path"]), r["compare"], SIDE_STYLE[1]))
    return out


def figures(r: dict, plt) -> list[tuple[str, object]]:
    """(file name, figure) for every plot the report has."""
    out = [(PER_DEPTH, per_depth(r, plt)), (BY_CONTEXT, by_context(r, plt)), (FC_INPUT, fc_input(r, plt))]
    if r.get("variants"):
        out.append((VARIANTS, variants(r, plt)))
    if r.get("sampling"):
        out.append((SAMPLING, sampling(r, plt)))
    return out


def _finish(fig, r: dict, styles: tuple[str, str] | None = None, *, bars: bool = False):
    """The title, and one legend below the axes (never over the data): each drafter's colour (a bar's patch or a
    line's marker) and, with ``styles``, what a solid and a dashed line mean; on a narrow figure, two to a row."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color=style["color"], label=label) if bars else Line2D([], [], label=label, **style)
        for label, _, style in sides(r)
    ]
    if styles:
        handles += [
            Line2D([], [], color="grey", linestyle=line, label=f"{word}: {meaning}")
            for line, word, meaning in zip(("-", "--"), ("solid", "dashed"), styles)
        ]
    columns = len(handles) if fig.get_figwidth() >= 12 else min(len(handles), 2)
    fig.legend(handles=handles, loc="outside lower center", ncol=columns, fontsize=8, frameon=False)
    fig.suptitle(title(r), fontsize=11)
    return fig


def _steps(ax, k: int) -> None:
    ax.set_xlabel("draft step k")
    ax.set_xticks(list(range(1, k + 1)))
    ax.set_xlim(0.7, k + 0.3)


def per_depth(r: dict, plt):
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6), layout="constrained")
    accept, attention, feedback = axes
    for label, side, style in sides(r):
        rows = side["per_depth"]
        steps = [d["step"] for d in rows]
        accept.plot(steps, [d["acceptance_rate"] or 0 for d in rows], label=label, **style)
        attention.plot(steps, [d["sink_attention"] or 0 for d in rows], label=f"{label}: sinks", **style)
        attention.plot(
            steps, [d["own_draft_attention"] or 0 for d in rows], linestyle="--", label=f"{label}: own drafts", **style
        )
        feedback.plot(steps, [d["feedback_norm_relative"] or 0 for d in rows], label=label, **style)
    accept.set_title("acceptance by depth", fontsize=10)
    accept.set_ylabel("P(draft k accepted)")
    accept.set_ylim(0, 1.02)  # a probability: its whole range, comparable between reports
    attention.set_title("the drafter's attention by depth", fontsize=10)
    attention.set_ylabel("share of the drafter's attention")
    feedback.set_title("fed-back state norm", fontsize=10)
    feedback.set_ylabel("|h_k| / |h_1|")
    for ax in (attention, feedback):  # small shares, and ratios near 1: scaled to what they hold, from 0
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
    for ax in axes:
        _steps(ax, r["num_speculative_tokens"])
    return _finish(fig, r, (f"attention on the first {r['sink_tokens']} positions", "on the chain's own drafts"))


def _bars(
    ax, categories: list[str], values: list[list[float | None]], drafters: list, span: tuple[float, float] | None = None
) -> None:
    """Grouped bars, one group per category ticked at its centre, one colour per drafter, each bar's value on it.
    ``span``: the value axis's whole range, the bars starting at its floor (an acceptance length's: 1, nothing
    accepted, to K + 1, every draft), so that a small difference looks small; None: from 0 to what the bars hold. A
    group is never wider than one of three: a single bucket made two bars the width of the figure."""
    floor = span[0] if span else 0.0
    width = 0.8 / len(values)
    for i, (series, (label, _, style)) in enumerate(zip(values, drafters)):
        xs = [x - 0.4 + width * (i + 0.5) for x in range(len(categories))]
        heights = [(v - floor) if v is not None else 0 for v in series]
        bars = ax.bar(xs, heights, width, bottom=floor, label=label, color=style["color"])
        ax.bar_label(bars, labels=["-" if v is None else f"{v:.2f}" for v in series], fontsize=7, padding=2)
    slack = max(0, 3 - len(categories)) / 2
    ax.set_xlim(-0.5 - slack, len(categories) - 0.5 + slack)
    ax.set_xticks(list(range(len(categories))), categories)
    top = max((v for series in values for v in series if v is not None), default=1.0)
    ax.set_ylim(floor, span[1] * 1.04 if span else top * 1.12)  # room for the values above the bars


def by_context(r: dict, plt):
    fig, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
    buckets, drafters = r["by_context_length"], sides(r)
    values = [
        [{b["bucket"]: b["acceptance_length"] for b in side["by_context_length"]}.get(b["bucket"]) for b in buckets]
        for _, side, _ in drafters
    ]
    _bars(ax, [b["bucket"] for b in buckets], values, drafters, span=(1.0, r["num_speculative_tokens"] + 1.0))
    ax.set_xticks(range(len(buckets)), [f"{b['bucket']}\n{b['every_position']['num_drafts']} chains" for b in buckets])
    ax.set_xlabel("position of the chain's start in the sequence (tokens)")
    ax.set_ylabel("acceptance length (every position)")
    ax.set_title(f"acceptance by absolute position (axis: 1, nothing accepted, to {r['num_speculative_tokens'] + 1})")
    ax.title.set_fontsize(10)
    return _finish(fig, r, bars=True)


def fc_input(r: dict, plt):
    fig, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
    drafters = [d for d in sides(r) if d[1].get("fc_input")]
    norms = [d[1]["fc_input"]["chunk_norms"] for d in drafters]
    n = max((len(x) for x in norms), default=0)
    values = [[*x, *[None] * (n - len(x))] for x in norms]
    _bars(ax, [f"aux {i}" for i in range(n)], values, drafters)  # numbered as the report's table numbers them
    ax.set_xlabel("fused target state (aux chunk), in ascending target layer")
    ax.set_ylabel("mean norm entering fc")
    ax.set_title("fused-input balance", fontsize=10)
    return _finish(fig, r, bars=True)


def variants(r: dict, plt):
    rows = r["variants"]["variants"]
    fig, ax = plt.subplots(figsize=(max(7.5, 1.2 * len(rows)), 4.8), layout="constrained")
    drafters = sides(r)
    picks = [lambda row: row, lambda row: row["compare"]][: len(drafters)]
    values = [[pick(row)["acceptance_length"] for row in rows] for pick in picks]
    _bars(ax, [row["name"] for row in rows], values, drafters, span=(1.0, r["num_speculative_tokens"] + 1.0))
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax.set_xlabel("prompt framing (variant)")
    ax.set_ylabel("acceptance length (greedy vLLM run)")
    ax.set_title(f"the same {r['variants']['inputs']} inputs under each framing (axis from 1, nothing accepted)")
    ax.title.set_fontsize(10)
    return _finish(fig, r, bars=True)


def sampling(r: dict, plt):
    fig, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
    for label, side, style in sides(r):
        s = side.get("sampling")
        if s:
            steps = list(range(1, len(s["per_position_rate"]) + 1))
            ax.plot(steps, s["per_position_rate"], label=f"{label}: T={s['temperature']:g}", **style)
            greedy = [d["acceptance_rate"] or 0 for d in side["per_depth"]]
            ax.plot(steps, greedy, linestyle="--", label=f"{label}: greedy", **style)
    s = r["sampling"]
    ax.set_title(f"expected acceptance under vLLM's rejection sampler (top-p {s['top_p']:g})", fontsize=10)
    ax.set_ylabel("P(draft k accepted)")
    ax.set_ylim(0, 1.02)
    _steps(ax, r["num_speculative_tokens"])
    return _finish(fig, r, (f"sampling at temperature {s['temperature']:g} (expected)", "greedy, the same chains"))
