"""The run engine (ARCHITECTURE sections 3-5, 7): plain Python handed a `Store` (engine/seam.py).

- `loop.advance(store)`: a bounded number of steps of one claimed run.
- `process`: sequential and supervisor processes (who works next).
- `model`: tool offers (policy at offer time), the pre-call limits, the model call.
- `tools`: the ledger: policy at dispatch, holds, exactly-once dispatch, results.
- `limits.PRE_CALL_CHECKS`: budgets checked before every model call (extend here).
"""
