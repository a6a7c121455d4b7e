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
_STD_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def _std_base64(encoded: str) -> bytes:
    """Go's ``base64.StdEncoding``: padded groups of four, padding only at the end (Python's decoder accepts
    extra padding, as in "AAAAAAAA=")."""
    if not _STD_BASE64.fullmatch(encoded):
        raise ValueError("not standard padded base64")
    return base64.b64decode(encoded, validate=True)


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
        raw = _std_base64(parts[2])
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
    if not origin or not re.fullmatch(r"0|[1-9][0-9]{0,18}", size) or int(size) >= 1 << 63:
        raise SignedHeadError("checkpoint: empty origin or a tree size that is not a decimal number below 2^63")
    try:
        digest = _std_base64(root)
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


MAX_SIGNATURES = 100  # Go's note.Open stops reading a note with more signature lines


def _malformed(why: str) -> SignedHeadError:
    return SignedHeadError(f"malformed signed note: {why}")


def _split_note(note: str) -> tuple[str, list[str]]:
    """(text with its final newline, signature lines) of a signed note, unverified, split exactly as Go's
    ``sumdb/note.Open`` splits it: no control character but newline anywhere; the signature block follows the
    note's *last* blank line and ends with a newline (so trailing blank lines are malformed, not "no signature")."""
    for index, character in enumerate(note):
        if character < " " and character != "\n":
            raise _malformed(f"control character {character!r} at offset {index}")
    try:
        note.encode("utf-8")
    except UnicodeEncodeError as error:  # a lone surrogate, read from JSON: Go refuses a note that is not UTF-8
        raise _malformed(f"not UTF-8 text at offset {error.start}") from None
    split = note.rfind("\n\n")
    if split < 0:
        raise _malformed("no blank line between the text and the signatures")
    text, block = note[: split + 1], note[split + 2 :]
    if not block:
        raise _malformed("nothing after its last blank line: the signature lines come last (no trailing blank lines)")
    if not block.endswith("\n"):
        raise _malformed("the last signature line does not end with a newline")
    return text, block[:-1].split("\n")


def _signature(line: str, number: int) -> tuple[str, bytes, bytes]:
    """(key name, key ID, signature) of one signature line, or why it is malformed (Go's rules: the em-dash
    prefix, a name with no space or '+', standard padded base64 of at least five bytes)."""
    if not line.startswith(DASH + " "):
        raise _malformed(f"signature line {number} does not start with '{DASH} ': {line[:60]!r}")
    name, _, encoded = line[2:].partition(" ")
    if not _NAME.fullmatch(name) or not encoded:
        raise _malformed(f"signature line {number}: a key name (no spaces or '+') then a base64 signature")
    try:
        raw = _std_base64(encoded)
    except ValueError:
        raise _malformed(f"signature line {number}: the signature is not base64") from None
    if len(raw) < 5:
        raise _malformed(f"signature line {number}: a signature is a 4-byte key ID and at least one byte more")
    return name, raw[:4], raw[4:]


def unverified_tree_head(note: str) -> TreeHead:
    """The checkpoint a signed note carries, its signatures NOT checked (to pick the size to prove against;
    whoever checks the proof verifies the signature)."""
    return parse_tree_head(_split_note(note)[0])


def open_note(note: str, key: VerifierKey) -> str:
    """The text of a signed note, once ``key``'s signature on it verifies; else ``SignedHeadError``. As Go's
    ``note.Open``: every line is parsed (one malformed line refuses the note), other keys' lines are kept
    unverified, a key's repeated line is skipped, and more than 100 lines are refused."""
    text, lines = _split_note(note)
    if len(lines) > MAX_SIGNATURES:
        raise _malformed(f"{len(lines)} signature lines, more than {MAX_SIGNATURES}")
    signed: bytes | None = None
    for number, line in enumerate(lines, start=1):
        name, identity, signature = _signature(line, number)
        if (name, identity) != (key.name, key.id) or signed is not None:
            continue
        if not key.verify(signature, text.encode()):
            raise SignedHeadError(f"the signature of {key.name} on this head does not verify")
        signed = signature
    if signed is None:
        raise SignedHeadError(f"the head carries no signature by {key.name}+{key.id.hex()}")
    return text


def sign_tree_head(checkpoint: TreeHead, key: SigningKey) -> str:
    """The checkpoint as a signed note."""
    return sign_note(checkpoint.text(), key)


def open_signed_tree_head(note: str, key: VerifierKey) -> TreeHead:
    """The checkpoint of a signed note, once ``key``'s signature on it verifies; else ``SignedHeadError``."""
    return parse_tree_head(open_note(note, key))
