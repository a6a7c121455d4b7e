"""A token corpus: its rows are its parquet shards (name, SHA-256, sequences, largest id), pinned at registration;
training reads the sequences, one seeded pass without repeats, a row group at a time."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ledger.protocol.manifests import TokenCorpusManifest
from ledger.rows.builder import build_manifest
from ledger.rows.tasks.token_corpus import TokenCorpusError, TokenCorpusNotHere, TokenSequences


def write_shard(file: Path, sequences: list[list[int]], row_group_size: int = 3, column: str = "input_ids") -> Path:
    file.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({column: pa.array(sequences, type=pa.list_(pa.int32()))})
    pq.write_table(table, file, row_group_size=row_group_size)
    return file


def corpus(folder: Path, counts=(5, 7, 4), length: int = 6) -> dict[str, list[list[int]]]:
    """Shards named so that a plain sort would put train-10 before train-2; every sequence distinct."""
    written, start = {}, 0
    for number, count in zip((2, 10, 11), counts, strict=True):
        sequences = [[start + i] + [(start + i + j) % 97 for j in range(1, length)] for i in range(count)]
        write_shard(folder / f"train-{number}.parquet", sequences)
        written[f"train-{number}.parquet"] = sequences
        start += count
    return written


def spec(path: Path, **fields) -> TokenCorpusManifest:
    base = {"id": "web", "role": "train", "generator": "token_corpus", "path": str(path), "sequence_length": 6}
    return TokenCorpusManifest.model_validate(base | {"seed": 0, "split": "web"} | fields)


def test_the_rows_are_the_shards_in_natural_order_with_their_hashes_and_counts(tmp_path):
    written = corpus(tmp_path / "web")
    rows = build_manifest(spec(tmp_path / "web")).rows
    assert [row.prompt for row in rows] == list(written)  # train-2, train-10, train-11
    for row in rows:
        file = tmp_path / "web" / row.prompt
        assert row.meta["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
        assert row.meta["sequences"] == len(written[row.prompt])
        assert row.meta["max_token"] == max(max(s) for s in written[row.prompt])
    assert [row.prompt for row in build_manifest(spec(tmp_path / "web", shards=2)).rows] == list(written)[:2]


def test_a_changed_shard_is_another_manifest(tmp_path):
    corpus(tmp_path / "web")
    before = build_manifest(spec(tmp_path / "web")).sha256
    write_shard(tmp_path / "web" / "train-10.parquet", [[1, 2, 3, 4, 5, 6]] * 7)
    assert build_manifest(spec(tmp_path / "web")).sha256 != before


def test_a_corpus_not_packed_as_the_manifest_says_is_refused_in_one_line(tmp_path):
    with pytest.raises(TokenCorpusNotHere, match="not here"):
        build_manifest(spec(tmp_path / "missing"))
    write_shard(tmp_path / "ragged" / "a.parquet", [[1, 2, 3, 4, 5, 6], [1, 2, 3]])
    with pytest.raises(TokenCorpusError, match="sequences of 3-6 tokens, the manifest says 6"):
        build_manifest(spec(tmp_path / "ragged"))
    write_shard(tmp_path / "named" / "a.parquet", [[1, 2, 3, 4, 5, 6]], column="tokens")
    with pytest.raises(TokenCorpusError, match="no column 'input_ids'"):
        build_manifest(spec(tmp_path / "named"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenCorpusError, match=r"no \*\.parquet shards"):
        build_manifest(spec(tmp_path / "empty"))
    with pytest.raises(ValueError, match="role train"):
        spec(tmp_path / "web", role="eval")


def test_the_sequences_are_read_back_by_index_across_shards_and_row_groups(tmp_path):
    written = corpus(tmp_path / "web")
    rows = build_manifest(spec(tmp_path / "web")).rows
    sequences = TokenSequences(tmp_path / "web", rows, cached_groups=2)
    flat = [tuple(s) for shard in written.values() for s in shard]
    assert len(sequences) == len(flat) == 16
    assert [sequences[i].input_ids for i in range(len(flat))] == flat
    assert [sequences[i].input_ids for i in reversed(range(len(flat)))] == flat[::-1]  # evicted groups reread


def test_a_pass_draws_every_sequence_once_in_a_seeded_order(tmp_path):
    corpus(tmp_path / "web")
    sequences = TokenSequences(tmp_path / "web", build_manifest(spec(tmp_path / "web")).rows)
    batch = 4
    one_pass = [s.input_ids for step in range(4) for s in sequences.batch_at(step * batch, batch, seed=11)]
    assert sorted(one_pass) == sorted(sequences[i].input_ids for i in range(16))  # 16 = 4 steps of 4: no repeats
    assert one_pass != [sequences[i].input_ids for i in range(16)]  # not the files' order
    again = [s.input_ids for step in range(4) for s in sequences.batch_at(step * batch, batch, seed=11)]
    other = [s.input_ids for step in range(4) for s in sequences.batch_at(step * batch, batch, seed=12)]
    assert again == one_pass and other != one_pass
    assert sequences.batch_at(2 * batch, batch, seed=11) == sequences.batch_at(2 * batch, batch, seed=11)  # resumable


def test_a_token_id_beyond_the_vocabulary_is_refused_before_it_is_embedded():
    import torch

    from arms.train.language import encode_ids

    class Vocabulary:
        pad_token_id, eos_token_id = 0, 1

        def __len__(self) -> int:
            return 10

    ids, mask = encode_ids([[1, 2, 9], [3]], Vocabulary(), 8, "cpu")
    assert ids.tolist() == [[1, 2, 9], [3, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert isinstance(ids, torch.Tensor)
    with pytest.raises(ValueError, match="token id 10 is beyond the base's vocabulary of 10"):
        encode_ids([[1, 10]], Vocabulary(), 8, "cpu")
