"""Signed tree heads: the ledger's Merkle head as a C2SP ``tlog-checkpoint``, signed as a C2SP signed note.

A checkpoint is three lines: the log's origin, the tree size in decimal, and the RFC 6962 root hash in
standard base64 (c2sp.org/tlog-checkpoint). It is signed as a note (c2sp.org/signed-note): the text, a
blank line, then ``— <key name> base64(key ID || Ed25519 signature over the text)``, where the key ID is
``SHA-256(key name || 0x0A || 0x01 || public key)[:4]``. Keys are written in the formats Go's
``golang.org/x/mod/sumdb/note`` reads: ``PRIVATE+KEY+<name>+<key ID hex>+base64(0x01 || seed)`` and
``<name>+<key ID hex>+base64(0x01 || public key)``, so other transparency-log tools can check our heads.

A researcher publishes the signed head with the claims; an auditor later proves the ledger extends it
(``ledger verify --trusted-head FILE --key PUB``) or checks one entry against it without the database
(``ledger prove`` / ``ledger verify-proof``).
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

ED25519 = b"\x01"
DASH = "\u2014"  # em dash: a signature line starts with it
_NAME = re.compile(r"[^\s+]+")


class SignedHeadError(ValueError):
    """A key, checkpoint or signed note that is malformed or does not verify (one line)."""


def key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + ED25519 + public).digest()[:4]


def _check_name(name: str) -> str:
    if not _NAME.fullmatch(name or ""):
        raise SignedHeadError(f"a key name is non-empty, without spaces or '+': got {name!r}")
    return name


@dataclass(frozen=True)
class SigningKey:
    name: str
    seed: bytes  # the 32-byte Ed25519 private seed

    def public(self) -> bytes:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        key = Ed25519PrivateKey.from_private_bytes(self.seed)
        return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def sign(self, message: bytes) -> bytes:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)

    def text(self) -> str:
        encoded = base64.b64encode(ED25519 + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{key_id(self.name, self.public()).hex()}+{encoded}"

    def verifier(self) -> VerifierKey:
        return VerifierKey(self.name, self.public())


@dataclass(frozen=True)
class VerifierKey:
    name: str
    public: bytes  # the 32-byte Ed25519 public key

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.public)

    def text(self) -> str:
        return f"{self.name}+{self.id.hex()}+{base64.b64encode(ED25519 + self.public).decode()}"

    def verify(self, signature: bytes, message: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


def generate_key(name: str) -> SigningKey:
    import os

    return SigningKey(_check_name(name), os.urandom(32))


def _key_parts(text: str, prefix: str, what: str) -> tuple[str, bytes, bytes]:
    value = text.strip()
    if not value.startswith(prefix):
        raise SignedHeadError(f"not a {what} (expected {prefix or 'NAME'}+ID+KEY)")
    parts = value[len(prefix) :].split("+", 2)  # the base64 key may itself hold "+"
    if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{8}", parts[1]):
        raise SignedHeadError(f"not a {what}: expected NAME+ID+KEY with an 8-hex-digit key ID")
    try:
        raw = base64.b64decode(parts[2], validate=True)
    except ValueError:
        raise SignedHeadError(f"not a {what}: the key is not base64") from None
    if len(raw) != 33 or raw[:1] != ED25519:
        raise SignedHeadError(f"not a {what}: only Ed25519 keys (type 0x01, 32 bytes) are supported")
    return _check_name(parts[0]), bytes.fromhex(parts[1]), raw[1:]


def parse_signing_key(text: str) -> SigningKey:
    name, kid, seed = _key_parts(text, "PRIVATE+KEY+", "signing key")
    key = SigningKey(name, seed)
    if key_id(name, key.public()) != kid:
        raise SignedHeadError("signing key: its key ID does not match its name and key")
    return key


def parse_verifier_key(text: str) -> VerifierKey:
    if text.strip().startswith("PRIVATE+KEY+"):
        raise SignedHeadError("this is a private signing key: verify with the public key (the .pub file)")
    name, kid, public = _key_parts(text, "", "public key")
    key = VerifierKey(name, public)
    if key.id != kid:
        raise SignedHeadError("public key: its key ID does not match its name and key")
    return key


# ----------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True)
class TreeHead:
    origin: str
    size: int
    root: bytes  # 32 bytes

    def text(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    @property
    def root_hex(self) -> str:
        return self.root.hex()


def parse_tree_head(text: str) -> TreeHead:
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise SignedHeadError("a checkpoint is origin, tree size and root hash, one per line, ending in a newline")
    origin, size, root = lines[0], lines[1], lines[2]
    if not origin or not re.fullmatch(r"0|[1-9][0-9]*", size):
        raise SignedHeadError("checkpoint: empty origin or a tree size that is not a decimal number")
    try:
        digest = base64.b64decode(root, validate=True)
    except ValueError:
        raise SignedHeadError("checkpoint: the root hash is not base64") from None
    if len(digest) != 32:
        raise SignedHeadError("checkpoint: the root hash is not 32 bytes")
    return TreeHead(origin, int(size), digest)


def sign_note(text: str, key: SigningKey) -> str:
    """``text`` (ending in a newline) as a signed note with one signature line by ``key``."""
    if not text.endswith("\n"):
        raise SignedHeadError("a note's text ends with a newline")
    signature = base64.b64encode(key_id(key.name, key.public()) + key.sign(text.encode())).decode()
    return f"{text}\n{DASH} {key.name} {signature}\n"


def _split_note(note: str) -> tuple[str, str]:
    """(text with its final newline, signature block) of a signed note, unverified."""
    if "\n\n" not in note:
        raise SignedHeadError("not a signed note: no blank line between the text and the signatures")
    text, _, signatures = note.rpartition("\n\n")
    return text + "\n", signatures


def unverified_tree_head(note: str) -> TreeHead:
    """The checkpoint a signed note carries, its signatures NOT checked (to pick the size to prove against;
    whoever checks the proof verifies the signature)."""
    return parse_tree_head(_split_note(note)[0])


def open_note(note: str, key: VerifierKey) -> str:
    """The text of a signed note, once ``key``'s signature on it verifies (other keys' lines are ignored, as the
    format requires); else ``SignedHeadError``."""
    text, signatures = _split_note(note)
    lines = signatures.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    if not lines:
        raise SignedHeadError("signed note without signature lines")
    verified = False
    for line in lines:
        match = re.fullmatch(rf"{DASH} (\S+) ([A-Za-z0-9+/=]+)", line)
        if match is None:
            raise SignedHeadError(f"malformed signature line: {line[:60]!r}")
        try:
            raw = base64.b64decode(match.group(2), validate=True)
        except ValueError:
            raise SignedHeadError("a signature is not base64") from None
        if match.group(1) != key.name or raw[:4] != key.id:
            continue
        if not key.verify(raw[4:], text.encode()):
            raise SignedHeadError(f"the signature of {key.name} on this head does not verify")
        verified = True
    if not verified:
        raise SignedHeadError(f"the head carries no signature by {key.name}+{key.id.hex()}")
    return text


def sign_tree_head(checkpoint: TreeHead, key: SigningKey) -> str:
    """The checkpoint as a signed note."""
    return sign_note(checkpoint.text(), key)


def open_signed_tree_head(note: str, key: VerifierKey) -> TreeHead:
    """The checkpoint of a signed note, once ``key``'s signature on it verifies; else ``SignedHeadError``."""
    return parse_tree_head(open_note(note, key))
