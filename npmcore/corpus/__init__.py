"""The ingest stage: raw inputs (MediaWiki dumps, WikiExtractor output, WARC crawls, jsonl, lines) read, deduplicated,
cut into blocks of encoder tokens and written as corpus snapshots; training bundles of a snapshot.

Imports only npmcore's shared modules (the top level: storage, snapshots, sources, cluster, encoder, …)."""
