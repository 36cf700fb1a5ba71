"""attnviz app from a checkout: `streamlit run app.py` (installed: `attnviz app`).

The app is package code, attnviz/app/ (main.py, ui.py, views/); this file only runs it.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # `import attnviz` from a checkout that is not installed
    sys.path.insert(0, str(ROOT))

from attnviz.app.main import run  # noqa: E402

run()
