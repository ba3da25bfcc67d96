"""``verify --against vllm`` for a P-EAGLE drafter: vLLM's counters beside the simulation of each reading it takes.

vLLM serves a P-EAGLE drafter two ways (``engines/vllm_peagle.py``): with ``parallel_drafting: true`` (its serve line,
and ``vllm serve DRAFTER`` for a speculators peagle config) it drafts all K tokens in one pass; named in
``--speculative-config`` without it, it drafts a chain with the same weights, as an EAGLE 3 drafter, skipping
``mask_hidden``, its flags as vLLM reads them (a speculators peagle config's ``norm_output`` dropped). Each run's
counters are compared with the simulation of that reading, and both beside the trained reading's (the drafter as read:
parallel, its own flags), so that a reading other than the trained one shows as the acceptance length it costs.
"""

from __future__ import annotations

from dataclasses import replace

from .. import engines
from ..engines.vllm import parse_version
from .checks import Check
from .run import resolved_ids, totals


def _vllm_reading(loaded, version: str, num_layers: int):
    """The drafter as this vLLM release runs it in parallel (its EngineView's drafter); the trained reading where the
    rules say it would not load (vLLM loaded it all the same: the counters then say what it ran)."""
    release = engines.parse("vllm==" + ".".join(map(str, parse_version(version))))
    view = engines.interpret(loaded, release, target_num_layers=num_layers)
    return view.drafter if view.loads and view.drafter is not None else loaded.drafter


def _renamed(checks: list[Check], suffix: str) -> list[Check]:
    return [replace(c, name=f"{c.name}_{suffix}", detail=f"without parallel_drafting: {c.detail}") for c in checks]


def against_readings(served, chain_served, verifier, loaded, model, results, compare):
    """``compare`` (against_vllm's) for the parallel run against vLLM's parallel reading, and for the chain run
    against the chain reading; the trained reading's acceptance beside both."""
    L = verifier.target_config.num_layers
    reading = _vllm_reading(loaded, served["vllm_version"], L)
    ids = resolved_ids(reading, L)
    if reading == loaded.drafter:
        parallel_model, parallel_results = model, results
    else:
        parallel_model = verifier.model_for(loaded, drafter=reading)
        parallel_results, _ = verifier.run(parallel_model, ids, "vLLM's parallel reading")
    data, checks = compare(served, verifier, parallel_model, parallel_results)
    trained = totals(results)[0]
    data["readings"] = {
        "trained": trained.to_dict(),
        "vllm_parallel": totals(parallel_results)[0].to_dict(),
    }
    if "prompts" not in chain_served:  # refused or crashed without parallel_drafting
        why = chain_served.get("refused") or chain_served.get("crashed")
        data["chain"] = {"status": f"vLLM without parallel_drafting: {why}"}
        return data, checks
    chain = replace(reading, parallel=None, tensors=reading.tensors - {"mask_hidden"})
    chain_model = verifier.model_for(loaded, drafter=chain)
    chain_results, _ = verifier.run(chain_model, ids, "vLLM's chain reading (no parallel_drafting)")
    chain_data, chain_checks = compare(chain_served, verifier, chain_model, chain_results)
    chain_sim = totals(chain_results)[0]
    data["chain"] = chain_data
    data["readings"]["vllm_chain"] = chain_sim.to_dict()
    differs = chain_sim.to_dict() != trained.to_dict()
    checks += _renamed([c for c in chain_checks if c.name != "vllm_target_states"], "chain")
    checks.append(
        Check(
            "vllm_chain_reading",
            True,
            f"served without parallel_drafting, vLLM drafts a chain with this P-EAGLE drafter: AL"
            f" {chain_sim.acceptance_length:.3f}, "
            + (
                f"not the trained reading's {trained.acceptance_length:.3f} (parallel drafting): serve it with"
                ' "parallel_drafting": true'
                if differs
                else f"the same counters as the trained reading's ({trained.acceptance_length:.3f}) on these prompts"
            ),
        )
    )
    return data, checks
