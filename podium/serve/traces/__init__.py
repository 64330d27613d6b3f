"""Every request's trace, kept on disk and served back by id.

    files.py    the folder: trace ids (UUIDv7, so the order is in the names), owner-only
                files, the newest `keep` kept (`TraceFiles`)
    writer.py   the writer process that writes the files, and the pipe to it (`Writer`)
    store.py    what the server uses (`TraceStore`): hand a trace over, read it back as its
                owner, list the recent ones

`store` uses `writer` and `files`; `writer` uses `files` (and knows the store only as the
`Ledger` it hands traces over through); `files` uses neither.
"""
