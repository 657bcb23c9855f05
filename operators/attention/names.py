"""The names of attention's variants, spelled one way (operators/attention/operator.py parses them): the options in
the order causal, softcap<cap>, window<keys>, the cap exact (50.0 -> softcap50). A module of no imports, so that a
planner (evo.zoo) names a variant without loading the operator."""

__all__ = ["cap_text", "variant_name"]


def cap_text(cap: float) -> str:
    """A cap as a name spells it, exactly: 50.0 -> '50', 2.5 -> '2.5' (the shortest text that reads back as it)."""
    return str(int(cap)) if float(cap).is_integer() and abs(cap) < 1e15 else repr(float(cap))


def variant_name(causal: bool, softcap: float = 0.0, window: int = 0) -> str:
    """The operator's name for these options, in their canonical order and spelling."""
    return ("attention" + ("+causal" if causal else "") + (f"+softcap{cap_text(softcap)}" if softcap else "")
            + (f"+window{window}" if window else ""))
