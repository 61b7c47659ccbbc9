"""Seconds written for people, in the two forms the pipeline logs: an estimate in one unit with a decimal
(:func:`duration_in_one_unit`: ``7 s``, ``2.5 min``, ``3.1 h``; the index plan's costs) and a clock's reading in
whole units (:func:`duration_in_whole_units`: ``7 s``, ``2 min 30 s``, ``3 h 6 min``; progress lines' time
elapsed and left).

Imports nothing of npmcore: a shared module every stage may use."""


def duration_in_one_unit(seconds: float) -> str:
    """``7 s``, ``2.5 min``, ``3.1 h``."""
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.1f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )


def duration_in_whole_units(seconds: float) -> str:
    """``7 s``, ``2 min 30 s``, ``3 h 6 min``: the seconds rounded, in their two largest units."""
    minutes, s = divmod(round(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m} min" if hours else f"{m} min {s} s" if m else f"{s} s"
