"""The app's pages, one file each. Streamlit runs them by path (st.Page in attnviz/app/main.py); they are
not imported. The folder is not called pages/: beside the main script that name switches Streamlit into
its legacy multipage mode, where a first request for /heads runs that file alone."""
