"""The run store: `run_store.RunStore` (what the engine reads and writes for one claimed run), its tool-call
methods `calls.py`, its change notices `notices.py`, and the SQL it builds once `reads.py`."""
