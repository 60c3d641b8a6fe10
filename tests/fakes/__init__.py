"""Test doubles shared by the handler and CLI tests (a fake Kubernetes API over real TLS)."""
