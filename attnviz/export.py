"""Export an Analysis as JSON or NPZ (tokens, maps, prediction, model spec, attnviz version), and
figures as PNG/SVG. No Streamlit.

JSON layout (also the NPZ's "meta" entry, without the arrays):
  {"attnviz_version", "spec", "text", "tokens", "special", "target", "prediction": [[label, p]],
   "output_kind", "notes", "disabled", "trace_err",
   "maps": {name: {"layer": [L][n][n], "heads": [L][H][n][n] | null}}, "mixing": {name: [L][n]}}
NPZ arrays: "maps/NAME/layer", "maps/NAME/heads", "mixing/NAME", "special", plus "meta" (the JSON
above without maps and mixing, as a 0-d unicode array).
"""
from __future__ import annotations

import io
import json

import numpy as np

FORMAT = "attnviz-analysis/1"


def _meta(a) -> dict:
    from . import __version__

    return {"format": FORMAT, "attnviz_version": __version__, "spec": a.spec, "text": a.text,
            "tokens": list(map(str, a.tokens)), "special": [bool(s) for s in np.asarray(a.special)],
            "target": int(a.target), "prediction": [[str(t), float(p)] for t, p in a.prediction],
            "output_kind": a.output_kind, "notes": list(map(str, a.notes)),
            "disabled": {str(k): str(v) for k, v in a.disabled.items()}, "trace_err": float(a.trace_err),
            "methods": list(a.maps)}


def to_dict(a) -> dict:
    """Analysis -> plain dict of lists (JSON-ready); arrays keep full float64 precision."""
    d = _meta(a)
    d["maps"] = {name: {"layer": np.asarray(m.layer, dtype=np.float64).tolist(),
                        "heads": None if m.heads is None else np.asarray(m.heads, dtype=np.float64).tolist()}
                 for name, m in a.maps.items()}
    d["mixing"] = {name: np.asarray(v, dtype=np.float64).tolist() for name, v in a.mixing.items()}
    return d


def to_json(a, indent=None) -> str:
    """Analysis -> JSON text (non-ASCII tokens kept as they are)."""
    return json.dumps(to_dict(a), ensure_ascii=False, indent=indent)


def to_npz(a) -> bytes:
    """Analysis -> the bytes of a compressed .npz file."""
    arrays = {"meta": np.array(json.dumps(_meta(a), ensure_ascii=False)),
              "special": np.asarray(a.special, dtype=bool)}
    for name, m in a.maps.items():
        arrays[f"maps/{name}/layer"] = np.asarray(m.layer)
        if m.heads is not None:
            arrays[f"maps/{name}/heads"] = np.asarray(m.heads)
    for name, v in a.mixing.items():
        arrays[f"mixing/{name}"] = np.asarray(v)
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


def figure_bytes(fig, fmt: str = "png", scale: float = 2.0) -> bytes:
    """plotly Figure -> PNG or SVG bytes (kaleido, which drives a headless Chromium)."""
    fmt = fmt.lower()
    if fmt not in ("png", "svg"):
        raise ValueError(f"format must be 'png' or 'svg', got {fmt!r}")
    width = fig.layout.width or 1200
    return fig.to_image(format=fmt, width=width, height=fig.layout.height or 600,
                        scale=scale if fmt == "png" else 1)
