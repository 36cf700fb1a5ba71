"""Export an Analysis as JSON or NPZ (tokens, maps, prediction, model spec, attnviz version), and
figures as PNG/SVG. No Streamlit.

JSON layout (also the NPZ's "meta" entry, without the arrays):
  {"attnviz_version", "spec", "text", "tokens", "special", "target", "prediction": [[label, p]],
   "choices": [[[word, ...], [p, ...]]] (is/are, was/were, has/have, his/her/their at a [MASK] blank),
   "output_kind", "notes", "disabled", "trace_err", "methods", "method_info": {name: {"label", "unit",
   "rows_sum_to_one", "reference"}},
   "maps": {name: {"layer": [L][n][n], "heads": [L][H][n][n] | null}}, "mixing": {name: [L][n]}}
NPZ arrays: "maps/NAME/layer", "maps/NAME/heads", "mixing/NAME", "special", plus "meta" (the JSON
above without maps and mixing, as a 0-d unicode array).

Values that are not finite (NaN or inf: a broken model) are never written silently: "nonfinite" (in
the JSON, the NPZ's meta and as an NPZ array) lists the keys that hold any, and a note says so; JSON
writes each such value as null, NPZ keeps them as they are.
"""
from __future__ import annotations

import io
import json
import math

import numpy as np

FORMAT = "attnviz-analysis/1"


def _meta(a) -> dict:
    from . import __version__

    return {"format": FORMAT, "attnviz_version": __version__, "spec": a.spec, "text": a.text,
            "tokens": list(map(str, a.tokens)), "special": [bool(s) for s in np.asarray(a.special)],
            "target": int(a.target), "prediction": [[str(t), float(p)] for t, p in a.prediction],
            "choices": [[list(map(str, w)), [float(x) for x in p]] for w, p in getattr(a, "choices", [])],
            "output_kind": a.output_kind, "notes": list(map(str, a.notes)),
            "disabled": {str(k): str(v) for k, v in a.disabled.items()}, "trace_err": float(a.trace_err),
            "methods": list(a.maps), "method_info": _method_info(a.maps)}


def _method_info(names) -> dict:
    """What each exported map measures, from the method registry (label, unit, rows sum to one, reference)."""
    from .methods import METHODS

    return {str(m): {"label": METHODS[m].label, "unit": METHODS[m].unit,
                     "rows_sum_to_one": bool(METHODS[m].rows_sum_to_one), "reference": METHODS[m].reference}
            for m in names if m in METHODS}


def _arrays(a) -> dict:
    """key -> array for every map and mixing ratio (the NPZ keys)."""
    out = {}
    for name, m in a.maps.items():
        out[f"maps/{name}/layer"] = np.asarray(m.layer)
        if m.heads is not None:
            out[f"maps/{name}/heads"] = np.asarray(m.heads)
    for name, v in a.mixing.items():
        out[f"mixing/{name}"] = np.asarray(v)
    return out


def _nonfinite_meta(a, d: dict) -> tuple:
    """Adds "nonfinite" (keys holding NaN or inf) and a note to the meta dict d; -> (keys, count)."""
    keys, count = [], 0
    for key, arr in _arrays(a).items():
        k = int(arr.size - np.isfinite(arr).sum())
        if k:
            keys.append(key)
            count += k
    for i, (_, p) in enumerate(a.prediction):
        if not math.isfinite(p):
            keys.append(f"prediction/{i}")
            count += 1
    if not math.isfinite(float(a.trace_err)):
        keys.append("trace_err")
        count += 1
    d["nonfinite"] = keys
    if keys:
        d["notes"] = list(d["notes"]) + [nonfinite_note(keys, count)]
    return keys, count


def nonfinite(a) -> tuple:
    """Analysis -> ([keys holding NaN or inf], number of such values)."""
    return _nonfinite_meta(a, {"notes": []})


def nonfinite_note(keys: list, count: int) -> str:
    more = f" and {len(keys) - 4} more" if len(keys) > 4 else ""
    return (f"{count} values are not finite (NaN or inf) -- written as null in JSON, listed under 'nonfinite': "
            f"{', '.join(keys[:4])}{more}")


def _listed(x) -> list:
    """array -> nested lists with null where a value is not finite."""
    x = np.asarray(x, dtype=np.float64)
    if np.isfinite(x).all():
        return x.tolist()
    return np.where(np.isfinite(x), x, None).tolist()


def finite_json(obj, path: str = "") -> tuple:
    """Any JSON-like object -> (the same with null for every non-finite float, [paths of those])."""
    bad = []

    def clean(x, p):
        if isinstance(x, (float, np.floating)):
            if math.isfinite(x):
                return float(x)
            bad.append(p)
            return None
        if isinstance(x, dict):
            return {k: clean(v, f"{p}/{k}") for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v, f"{p}/{i}") for i, v in enumerate(x)]
        if isinstance(x, np.ndarray):
            return clean(x.tolist(), p)
        return x

    return clean(obj, path), bad


def to_dict(a) -> dict:
    """Analysis -> plain dict of lists (JSON-ready: non-finite values are null, see "nonfinite");
    arrays keep full float64 precision."""
    d = _meta(a)
    _nonfinite_meta(a, d)
    d["prediction"] = [[t, p if math.isfinite(p) else None] for t, p in d["prediction"]]
    d["choices"] = [[w, [x if math.isfinite(x) else None for x in p]] for w, p in d["choices"]]
    d["trace_err"] = d["trace_err"] if math.isfinite(d["trace_err"]) else None
    d["maps"] = {name: {"layer": _listed(m.layer), "heads": None if m.heads is None else _listed(m.heads)}
                 for name, m in a.maps.items()}
    d["mixing"] = {name: _listed(v) for name, v in a.mixing.items()}
    return d


def to_json(a, indent=None) -> str:
    """Analysis -> strict JSON text (non-ASCII tokens kept as they are; never NaN or Infinity)."""
    return json.dumps(to_dict(a), ensure_ascii=False, indent=indent, allow_nan=False)


def to_npz(a) -> bytes:
    """Analysis -> the bytes of a compressed .npz file (non-finite values kept, listed in "nonfinite")."""
    meta = _meta(a)
    keys, _ = _nonfinite_meta(a, meta)
    meta, _ = finite_json(meta)
    arrays = {"meta": np.array(json.dumps(meta, ensure_ascii=False, allow_nan=False)),
              "special": np.asarray(a.special, dtype=bool),
              "nonfinite": np.array(keys, dtype=str) if keys else np.zeros(0, dtype="<U1"),
              **_arrays(a)}
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def read_npz(data: bytes) -> dict:
    """.npz bytes from to_npz -> the same dict shape as to_dict, arrays as numpy arrays."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        d = json.loads(str(z["meta"]))
        d["maps"] = {}
        d["mixing"] = {}
        for key in z.files:
            parts = key.split("/")
            if parts[0] == "maps":
                d["maps"].setdefault(parts[1], {"layer": None, "heads": None})[parts[2]] = z[key]
            elif parts[0] == "mixing":
                d["mixing"][parts[1]] = z[key]
    return d


def figure_bytes(fig, fmt: str = "png", scale: float = 2.0, caption=None) -> bytes:
    """plotly Figure -> PNG or SVG bytes (kaleido, which drives a headless Chromium). caption: a line or
    lines of plain text written under the figure (the sentence, model, target and prediction, what its
    marks mean), so that the file stands alone; the figure itself is left unchanged (a copy is drawn)."""
    import html as _html

    fmt = fmt.lower()
    if fmt not in ("png", "svg"):
        raise ValueError(f"format must be 'png' or 'svg', got {fmt!r}")
    if caption:
        lines = [caption] if isinstance(caption, str) else [c for c in caption if c]
        fig = type(fig)(fig)
        extra = 20 * len(lines) + 16
        old_b = fig.layout.margin.b if fig.layout.margin.b is not None else 80
        fig.update_layout(height=(fig.layout.height or 600) + extra, margin_b=old_b + extra)
        fig.add_annotation(text="<br>".join(_html.escape(str(x)) for x in lines), xref="paper", yref="paper",
                           x=0.0, y=0.0, xanchor="left", yanchor="top", yshift=-(old_b + 6), showarrow=False,
                           align="left", font=dict(size=13, color="#333"))
    width = fig.layout.width or 1200
    return fig.to_image(format=fmt, width=width, height=fig.layout.height or 600,
                        scale=scale if fmt == "png" else 1)
