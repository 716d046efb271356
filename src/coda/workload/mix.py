"""Model mixes: which DNN models a trace's GPU jobs are drawn from, with what weights
("AlexNet=2,ResNet50=1", "uniform", or a profile set's default_mix), normalised to sum
to 1 and checked against the set's models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from coda.text import clip
from coda.workload import limits


class HasModels(Protocol):
    """What a mix is checked against: a profile set's model names (a ProfileSet checks
    its own default_mix with normalise_mix, so this module cannot import it)."""

    @property
    def models(self) -> Sequence[str]: ...


def normalise_mix(mix: Any, profiles: HasModels) -> dict[str, float]:
    if not isinstance(mix, dict) or not mix:
        raise ValueError("mix must be a nonempty mapping of model -> weight")
    out: dict[str, float] = {}
    for k, v in mix.items():
        if k not in profiles.models:
            valid = ", ".join(profiles.models)
            raise ValueError(f"unknown model {clip(k)} in mix; valid: {valid}")
        top = limits.PROFILE["weight"].hi
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= top:
            raise ValueError(
                f"mix weight of {clip(k)} must be a finite number >= 0 and <= {top:g}, "
                f"got {clip(v)}"
            )
        out[k] = float(v)
    total = sum(out.values())
    if total <= 0:
        raise ValueError("mix weights must sum to > 0")
    return {k: v / total for k, v in out.items() if v > 0}


def parse_mix(text: str, profiles: HasModels) -> dict[str, float]:
    """ "AlexNet=2,ResNet50=1" -> normalised weights; "uniform" -> equal weights.

    Names match case-insensitively; a bare name means weight 1.
    """
    text = text.strip()
    if text.lower() == "uniform":
        return {m: 1.0 / len(profiles.models) for m in profiles.models}
    canon = {m.lower(): m for m in profiles.models}
    valid = ", ".join(profiles.models)
    weights: dict[str, float] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, w = part.partition("=")
        name = name.strip()
        model = canon.get(name.lower())
        if model is None:
            raise ValueError(f"unknown model {name!r} in mix {text!r}; valid: {valid}")
        if model in weights:
            raise ValueError(f"model {model!r} given twice in mix {text!r}")
        try:
            if sep and not limits.plain_number(w.strip()):
                raise ValueError(w)
            weight = float(w) if sep else 1.0
        except ValueError:
            raise ValueError(
                f"weight of {model!r} in mix {text!r} is not a number: {w!r}"
            ) from None
        weights[model] = weight
    if not weights:
        raise ValueError(
            f"empty mix {text!r}; use 'uniform' or e.g. 'AlexNet=2,ResNet50=1' ({valid})"
        )
    return normalise_mix(weights, profiles)
