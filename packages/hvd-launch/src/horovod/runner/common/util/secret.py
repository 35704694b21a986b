# secret.py - Horovod's horovod.runner.common.util.secret: job secrets and
# HMAC digests. hvd's launcher creates its secret with the rendezvous
# store's make_secret(); this module gives Horovod's names for the same.
"""Job secrets and message digests."""

import hashlib
import hmac
import secrets

__all__ = ["HOROVOD_SECRET_KEY", "SECRET_LENGTH", "DIGEST_LENGTH", "make_secret_key", "compute_digest",
           "check_digest"]

SECRET_LENGTH = 32  # bytes
DIGEST_LENGTH = 32  # bytes of an HMAC-SHA256
# The environment variable that carries the job secret to workers. hvd's
# engine reads HOROVOD_SECRET_KEY (Horovod used a private name for it).
HOROVOD_SECRET_KEY = "HOROVOD_SECRET_KEY"


def make_secret_key():
    """A new random secret of SECRET_LENGTH bytes."""
    return secrets.token_bytes(SECRET_LENGTH)


def compute_digest(key, message):
    """HMAC-SHA256 of `message` (bytes) under `key` (bytes)."""
    return hmac.new(key, message, hashlib.sha256).digest()


def check_digest(key, message, digest):
    """True when `digest` is the digest of `message` under `key` (constant-time compare)."""
    return hmac.compare_digest(compute_digest(key, message), digest)
