"""What every stage of vLLM's reading of a drafter (``engines/vllm.py`` ``interpret``) reads: the drafter as eaglekit
reads it, its files, the release's rules, and the class vLLM builds for it once that stage has picked it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model.drafter import Drafter
from . import vllm_peagle
from .common import Release

TABLE = "vllm_releases.json"


@dataclass
class Reading:
    """What every stage of ``interpret`` reads: the drafter as eaglekit reads it, its files, and the release's rules."""

    loaded: object  # LoadedDrafter
    rel: Release
    target_num_layers: int | None
    family: str = ""  # the drafter class vLLM builds: llama, qwen3 or mla
    attrs: dict = field(default_factory=dict)  # the config keys that class reads (the layer config for speculators)

    @property
    def rules(self) -> dict:
        return self.rel.rules

    @property
    def intended(self) -> Drafter:
        return self.loaded.drafter

    @property
    def config(self) -> dict:
        return self.loaded.checkpoint.config or {}

    @property
    def raw_names(self) -> set[str]:
        return set(self.loaded.checkpoint.tensors)

    @property
    def speculators(self) -> bool:
        return isinstance(self.config.get("speculators_config"), dict)

    @property
    def peagle(self) -> bool:
        """A speculators peagle config (update_peagle's reading, not update_eagle3's)."""
        return vllm_peagle.is_speculators_peagle(self.config)

    @property
    def eagle_config(self) -> dict:
        ec = self.attrs.get("eagle_config")
        return ec if isinstance(ec, dict) else {}
