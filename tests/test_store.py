"""Store internals that users feel: schema versions, lexical pruning, query plans."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from convmem import HashingEmbedder, Memory, StoreError
from convmem.errors import InvalidInputError
from convmem.governance import KeepAllMarker
from convmem.store import SQLiteStore, matrix_rows, parse_filters
from convmem.store import lexical as store_lexical
from convmem.store import schema as store_schema
from convmem.store.records import HALF_TAG, matrix_bytes
from convmem.text import tokenize
from helpers import make_turns


def test_a_store_from_a_newer_convmem_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Memory.open(str(path), embedder=HashingEmbedder(), workers=0):
        pass
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="upgrade convmem"):
        Memory.open(str(path), embedder=HashingEmbedder(), workers=0)


def _older_store(path: Path, version: int, undo: str) -> None:
    """A store with one indexed conversation, taken back to schema ``version`` by ``undo``
    (what the later migrations added)."""
    with Memory.open(str(path), embedder=HashingEmbedder(), workers=0) as memory:
        memory.add_turns("c", make_turns(["护照明年过期", "好的"]))
        memory.flush()
    conn = sqlite3.connect(path)
    conn.execute(undo)
    conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(version),))
    conn.commit()
    conn.close()


def test_an_older_store_is_migrated_on_open(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _older_store(path, 1, "DROP TABLE chunks_vocab")
    with Memory.open(str(path), embedder=HashingEmbedder(), workers=0) as memory:
        version = (
            memory.store._db()
            .execute("SELECT value FROM meta WHERE key='schema_version'")
            .fetchone()
        )
        assert version == (str(store_schema.SCHEMA_VERSION),)
        assert memory.search("护照", top_k=1)  # tenant-wide lexical uses the new table


def test_a_conversations_participants_are_read_from_an_index_alone(tmp_path: Path) -> None:
    """Every search of one conversation reads who speaks in it; the rows hold the vectors
    (pages of them per row), so the names come from a covering index, in a store migrated
    from version 7 too."""
    path = tmp_path / "p.db"
    _older_store(path, 7, "DROP INDEX chunks_participants")
    with Memory.open(str(path), embedder=HashingEmbedder(), workers=0) as memory:
        plan = memory.store._db().execute(
            "EXPLAIN QUERY PLAN SELECT DISTINCT participants FROM chunks WHERE tenant=? AND "
            "conversation_id=? AND deleted=0",
            ["default", "c"],
        )
        assert "COVERING INDEX chunks_participants" in " ".join(str(row) for row in plan)
        assert memory.store.conversation_participants("default", "c")


def test_tenant_wide_lexical_keeps_rare_terms_when_common_ones_are_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_lexical.LexicalStats, "POSTINGS_BUDGET", 5)
    with Memory.open(str(tmp_path / "m.db"), embedder=HashingEmbedder(), workers=0) as memory:
        for index in range(12):
            memory.add_turns(
                f"c{index}", make_turns([f"common words everywhere number {index}", "common reply"])
            )
        memory.add_turns(
            "rare", make_turns(["common words and the zanzibar itinerary", "common reply"])
        )
        memory.flush()
        spec = parse_filters(None, tenant="default")
        hits = memory.store.lexical("default", spec, ["zanzibar", "common"], 5)
        assert len(hits) == 1  # only the rare term survived the budget, and it still matches
        top = memory.search("common words zanzibar", top_k=1, mode="lexical")
        assert top[0].metadata["conversation_id"] == "rare"


def test_a_term_alone_past_the_budget_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tenant-wide, a query whose rarest term is past the postings budget reads nothing
    lexically (the vector side answers), however far below the pair limit it is."""
    monkeypatch.setattr(store_lexical.LexicalStats, "POSTINGS_BUDGET", 3)
    with Memory.open(str(tmp_path / "m.db"), embedder=HashingEmbedder(), workers=0) as memory:
        texts = [f"the harbour ferry on day {index}" for index in range(6)]
        texts.append("the zanzibar ferry")
        records = [
            {
                "chunk_id": f"k{i}",
                "text": text,
                "metadata": {"conversation_id": f"c{i}", "turn_range": [0, 1]},
            }
            for i, text in enumerate(texts)
        ]
        assert memory.upsert_chunks(records).errors == []
        store, spec = memory.store, parse_filters(None, tenant="default")
        assert store.LONE_TERM_POSTINGS > 7  # type: ignore[attr-defined]
        assert store.lexical("default", spec, tokenize("ferry"), 10) == []
        hits = store.lexical("default", spec, tokenize("zanzibar ferry"), 10)
        assert len(hits) == 1  # zanzibar, within the budget; ferry left out
        store.POSTINGS_BUDGET = 7  # type: ignore[attr-defined]
        assert len(store.lexical("default", spec, tokenize("ferry"), 10)) == 7


def test_tenant_wide_lexical_reads_left_out_terms_in_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Terms left out for the budget still find the few chunks that hold two of them
    ("read" and "book", each in many chunks), ranked below the rare term's chunk."""
    monkeypatch.setattr(store_lexical.LexicalStats, "POSTINGS_BUDGET", 3)
    with Memory.open(str(tmp_path / "m.db"), embedder=HashingEmbedder(), workers=0) as memory:
        for index in range(5):
            memory.add_turns(f"r{index}", make_turns([f"I read the news on page {index}", "ok"]))
            memory.add_turns(f"b{index}", make_turns([f"I bought a book at shop {index}", "ok"]))
        memory.add_turns("both", make_turns(["I read the book my sister gave me", "ok"]))
        memory.add_turns("rare", make_turns(["I booked the zanzibar ferry for the trip", "ok"]))
        memory.flush()
        spec = parse_filters(None, tenant="default")
        store = memory.store
        tokens = tokenize("read book zanzibar")

        def found(pairs: int) -> list[str]:
            monkeypatch.setattr(store_lexical, "PAIRS", pairs)
            hits = store.lexical("default", spec, tokens, 10)
            return [
                row[2]["conversation_id"]
                for row in store.load_rows("default", [h for h, _ in hits]).values()
            ]

        assert found(0) == ["rare"]  # read and book are each in six chunks: over budget
        assert sorted(found(6)) == ["both", "rare"]
        # a secondary ranking reads no pairs (within a quarter of the budget: zanzibar's 1)
        store.POSTINGS_BUDGET = 4  # type: ignore[attr-defined]
        hits = store.lexical("default", spec, tokens, 10, secondary=True)
        assert len(hits) == 1


def test_chinese_left_out_terms_are_not_paired(tmp_path: Path) -> None:
    """A Chinese question's words and the bigrams inside them (最喜, 欢的) occur together far
    more often than independent words: only the other terms are read in pairs."""
    with Memory.open(str(tmp_path / "m.db"), embedder=HashingEmbedder(), workers=0) as memory:
        store = memory.store
        store._term_cache.update(  # type: ignore[attr-defined]
            {"最喜": 3000, "欢的": 3100, "read": 3000, "book": 3200, "zanzibar": 2}
        )
        terms = ["最喜", "欢的", "read", "book", "zanzibar"]
        pairs = store._pairs(terms, {"zanzibar"}, lambda: 100_000)  # type: ignore[attr-defined]
        assert pairs == [("read", "book")]


def test_hit_rows_are_looked_up_by_rowid_not_by_scanning_the_tenant(tmp_path: Path) -> None:
    with Memory.open(str(tmp_path / "m.db"), embedder=HashingEmbedder(), workers=0) as memory:
        conn = memory.store._db()
        marks = ",".join("?" * 10)
        plan = conn.execute(
            f"EXPLAIN QUERY PLAN SELECT rowid FROM chunks NOT INDEXED WHERE tenant=? AND deleted=0 "
            f"AND rowid IN ({marks})",
            ["default", *range(10)],
        ).fetchall()
        assert "PRIMARY KEY" in str(plan)


def test_hnsw_catch_up_in_small_pages_matches_the_store(tmp_path: Path) -> None:
    from convmem.store.ann import AnnIndex

    with Memory.open(str(tmp_path / "m.db"), embedder=HashingEmbedder(), workers=0) as memory:
        for conv in range(6):
            memory.add_turns(
                f"c{conv}", make_turns([f"记录{conv}-{i}：旅行和预算" for i in range(20)])
            )
        memory.flush()
        memory.delete("c2")
        memory.flush()
        index = AnnIndex(memory.store, "default", memory.embedding.dimension, min_rows=0, page=7)
        assert index.sync()
        live = {
            row[0] for row in memory.store._db().execute("SELECT rowid FROM chunks WHERE deleted=0")
        }
        assert set(map(int, index._index.keys)) == live
        spec = parse_filters(None, tenant="default")
        query = memory.embedding.embed_array(["旅行 预算"])[0]
        approx = [score for _, score in index.search(query, 10, spec)]
        exact = [score for _, score in memory.store.scan_vectors("default", spec, query, 10)]
        # near-identical texts tie; f16 may reorder ties, but the scores must agree
        assert approx == pytest.approx(exact, abs=2e-3)


def test_a_word_searched_before_it_exists_is_found_once_indexed(memory: Memory) -> None:
    memory.add_turns("a", make_turns(["filler text about nothing", "ok"]))
    memory.flush()
    assert memory.search("quokka", top_k=5, mode="lexical") == []
    memory.add_turns("b", make_turns(["we saw a quokka on the island", "cute"]))
    memory.flush()
    hits = memory.search("quokka", top_k=5, mode="lexical")
    assert hits and hits[0].metadata["conversation_id"] == "b"


def test_lexical_index_is_rebuilt_when_the_tokenizer_changes(tmp_path: Path) -> None:
    path = str(tmp_path / "tok.db")
    with Memory.open(path, embedder=HashingEmbedder(), workers=0) as memory:
        memory.add_turns("c", make_turns(["She painted two sunrises by the lake.", "Lovely."]))
        memory.flush()
        conn = memory.store._db()
        tokens = conn.execute("SELECT tokens FROM chunks_fts").fetchall()
        assert all("paint" in row[0].split() for row in tokens)  # stems are indexed
        assert memory.search("paint a sunrise", top_k=1, mode="lexical")
    conn = sqlite3.connect(path)  # an index written by tokenizer 1 (no stemming)
    conn.execute("UPDATE chunks_fts SET tokens = 'she painted two sunrises lake'")
    conn.execute("UPDATE meta SET value='1' WHERE key='tokenizer_version'")
    conn.commit()
    conn.close()
    with Memory.open(path, embedder=HashingEmbedder(), workers=0) as memory:
        version = (
            memory.store._db()
            .execute("SELECT value FROM meta WHERE key='tokenizer_version'")
            .fetchone()
        )
        assert version == (store_schema.tokenizer_signature(),)
        hits = memory.search("paint a sunrise", top_k=1, mode="lexical")
        assert hits and "painted" in hits[0].text


def test_traditional_and_simplified_chinese_match(tmp_path: Path) -> None:
    with Memory.open(str(tmp_path / "t.db"), embedder=HashingEmbedder(), workers=0) as memory:
        memory.add_turns("c", make_turns(["我的護照明年三月過期。", "好的。"]))
        memory.flush()
        hits = memory.search("护照 过期", top_k=1, mode="lexical")
        assert hits and "護照" in hits[0].text  # stored text is never rewritten


USER_DICT_SCRIPT = r"""
import sys
from convmem import HashingEmbedder, Memory
from convmem.text import tokenize
path, dictionary = sys.argv[1], sys.argv[2]
before = tokenize("量子猫薄荷真好用")
with Memory.open(path, embedder=HashingEmbedder(), workers=0, user_dict=dictionary) as memory:
    tokens = memory.store._db().execute("SELECT tokens FROM chunks_fts").fetchone()[0]
    print("量子猫薄荷" not in before, "量子猫薄荷" in tokens.split())
"""


def test_a_user_dictionary_changes_tokens_and_rebuilds_the_index(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = str(tmp_path / "u.db")
    with Memory.open(path, embedder=HashingEmbedder(), workers=0) as memory:
        memory.add_turns("c", make_turns(["我每天用量子猫薄荷给猫咪做玩具。", "嗯"]))
        memory.flush()
    dictionary = tmp_path / "words.txt"
    dictionary.write_text("量子猫薄荷 100 n\n", encoding="utf-8")
    script = tmp_path / "run.py"
    script.write_text(USER_DICT_SCRIPT, encoding="utf-8")
    # a separate process: jieba's dictionary is process-wide
    out = subprocess.run(
        [sys.executable, str(script), path, str(dictionary)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["True", "True"]


def test_connections_of_ended_threads_are_closed(tmp_path: Path) -> None:
    import threading

    with Memory.open(str(tmp_path / "t.db"), embedder=HashingEmbedder(), workers=0) as memory:
        memory.add_turns("c", make_turns(["hello there", "hi"]))

        def read() -> None:
            memory.search("hello", mode="lexical")

        for _ in range(50):
            thread = threading.Thread(target=read)
            thread.start()
            thread.join()
        store = memory.store
        assert isinstance(store, SQLiteStore)
        # each new connection closes those of ended threads: the caller's and the last one
        assert store.open_connections <= 3
        cache = store._db().execute("PRAGMA cache_size").fetchone()[0]
        assert cache == -8192


def test_postgres_urls_keep_spaces_in_options_as_libpq_reads_them() -> None:
    from convmem.store.postgres import _parse_url

    conninfo, schema, ef_search = _parse_url(
        "postgres://u@h:5432/db?schema=tenant_a&options=-c%20statement_timeout%3D5000"
    )
    assert schema == "tenant_a" and "schema=" not in conninfo and ef_search is None
    assert conninfo.startswith("postgresql://u@h:5432/db?")
    assert "options=-c%20statement_timeout%3D5000" in conninfo and "+" not in conninfo


def test_postgres_urls_take_ef_search_and_name_a_bad_one() -> None:
    from convmem.store.postgres import _parse_url

    conninfo, _, ef_search = _parse_url("postgresql://u@h/db?ef_search=400&sslmode=disable")
    assert ef_search == 400 and "ef_search" not in conninfo and "sslmode=disable" in conninfo
    for bad in ("0", "1001", "many"):
        with pytest.raises(InvalidInputError, match="ef_search") as caught:
            _parse_url(f"postgresql://u@h/db?ef_search={bad}")
        assert caught.value.field == "url"


def _long_conversation(memory: Memory) -> None:
    """Forty chunks of one conversation (one deleted, one expired, both about the ferry)
    and ten of another."""
    words = ["ferry", "pier", "tickets", "harbour", "lunch", "island", "noon", "boat"]
    records = [
        {
            "chunk_id": f"long{i}",
            "text": " ".join(words[(i * j) % len(words)] for j in range(1, 2 + i % 6))
            + f" note {i}",
            "metadata": {"conversation_id": "long", "turn_range": [i, i]},
        }
        for i in range(40)
    ]
    records += [
        {
            "chunk_id": f"other{i}",
            "text": f"ferry ferry pier other {i}",
            "metadata": {"conversation_id": "other", "turn_range": [i, i]},
        }
        for i in range(10)
    ]
    records.append(
        {
            "chunk_id": "gone",
            "text": "ferry pier tickets ferry",
            "metadata": {"conversation_id": "long", "turn_range": [50, 50]},
        }
    )
    records.append(
        {
            "chunk_id": "old",
            "text": "ferry pier tickets ferry",
            "metadata": {
                "conversation_id": "long",
                "turn_range": [51, 51],
                "expires_at": "2000-01-01T00:00:00+00:00",
            },
        }
    )
    assert memory.upsert_chunks(records).errors == []
    assert memory.delete("long", chunk_ids=["gone"]).deleted == 1


def test_a_long_conversation_is_read_through_the_indexes_with_the_same_scores(
    tmp_path: Path,
) -> None:
    """A conversation of more than SCOPE_SCAN_ROWS live chunks has only its rows that hold
    an asked term read, found through the full-text index: the same BM25 scores and term
    counts as reading every row, and never a deleted, expired or foreign chunk."""
    with Memory.open(
        str(tmp_path / "m.db"), embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0
    ) as memory:
        _long_conversation(memory)
        store = memory.store
        rows = dict(store._db().execute("SELECT rowid, chunk_id FROM chunks").fetchall())
        spec = parse_filters({"conversation_id": "long"}, tenant=memory.tenant)
        ferry, pier, lunch, zebra = (tokenize(w)[0] for w in ("ferry", "pier", "lunch", "zebra"))
        queries = [[ferry, pier], [lunch], [zebra]]

        def searched(limit: int) -> tuple[object, list[str]]:
            store.SCOPE_SCAN_ROWS = limit
            statements: list[str] = []
            store._db().set_trace_callback(statements.append)
            try:
                found = store.lexical_in_scope(memory.tenant, spec, queries, 50, [zebra, lunch])
            finally:
                store._db().set_trace_callback(None)
            return found, statements

        (scanned, scope), read_all = searched(10_000)
        (matched, matched_scope), read_matched = searched(5)
        assert not any("MATCH" in sql for sql in read_all)
        assert any("MATCH" in sql for sql in read_matched)
        assert matched == scanned and matched_scope == scope
        assert scope == (40, {zebra: 0, lunch: scope[1][lunch]}) and scope[1][lunch] > 0
        found = {rows[rowid] for ranking in matched for rowid, _ in ranking}
        assert found and all(name.startswith("long") for name in found)
        # a later search reads the cached average length and still scores the same
        assert searched(5)[0] == (scanned, scope)


def test_a_tenant_wide_search_reads_a_word_of_its_tenant_through_other_tenants_postings(
    tmp_path: Path,
) -> None:
    """Whether a tenant says a word is read from the word's postings in the shared
    full-text index, a batch at a time, past other tenants' and deleted rows, or, where
    the first batch does not tell and the tenant is small, from its own rows; a word
    whose first PRESENCE_POSTINGS postings are none of a large tenant's counts as said (a
    word wrongly said only lets a hit through, and reading on would read every posting
    of a word common elsewhere)."""
    with Memory.open(
        str(tmp_path / "m.db"), embedder=HashingEmbedder(), marker=KeepAllMarker(), workers=0
    ) as memory:
        crowd = memory.for_tenant("crowd")
        crowd.add_turns("c", make_turns([f"zebra number {i} crossed the road" for i in range(9)]))
        crowd.flush()
        memory.add_turns("mine", make_turns(["I saw a heron", "a zebra at the zoo", "gone"]))
        memory.flush()
        store = memory.store
        zebra, heron, walrus, crossed = (
            tokenize(w)[0] for w in ("zebra", "heron", "walrus", "crossed")
        )
        wide = parse_filters(None, tenant=memory.tenant)
        asked = [zebra, heron, walrus, crossed]
        found = (1, {zebra: 1, heron: 1, walrus: 0, crossed: 0})

        def presence(terms: list[str]) -> tuple[object, bool]:
            """tenant_terms, and whether it read the tenant's own rows' tokens."""
            statements: list[str] = []
            store._db().set_trace_callback(statements.append)
            try:
                counts = store.tenant_terms(memory.tenant, wide, terms)
            finally:
                store._db().set_trace_callback(None)
            return counts, any("SELECT rowid, tokens FROM chunks_fts" in sql for sql in statements)

        # the first batch of two postings of zebra and crossed is the crowd's: this small
        # tenant's own rows answer
        store.PRESENCE_BATCH = 2
        assert presence(asked) == (found, True)
        # a tenant past SCOPE_SCAN_ROWS reads on through the postings: the same answer
        store.SCOPE_SCAN_ROWS = 0
        assert presence(asked) == (found, False)
        # past the cap, a word only other tenants say often counts as said
        store.PRESENCE_POSTINGS = 2
        assert presence([crossed, walrus]) == ((1, {crossed: 1, walrus: 0}), False)
        del store.PRESENCE_POSTINGS, store.SCOPE_SCAN_ROWS  # the class's own again
        # deleted: the tenant says nothing (and has no live chunk)
        hits = memory.search("zebra zoo", top_k=5, min_score=0)
        chunk_ids = sorted({hit.chunk_id for hit in hits})
        assert memory.delete("mine", chunk_ids=chunk_ids).deleted == len(chunk_ids)
        assert store.tenant_terms(memory.tenant, wide, [zebra]) == (0, {zebra: 0})
        # the crowd's word is still its own
        crowd_wide = parse_filters(None, tenant="crowd")
        assert store.tenant_terms("crowd", crowd_wide, [zebra, heron]) == (1, {zebra: 1, heron: 0})


def test_a_long_conversation_reads_its_vectors_from_the_hnsw_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SCOPE_SCAN_ROWS a conversation's nearest chunks come from the tenant's HNSW
    sidecar, asked for enough neighbours to hold the conversation's share: the exact
    scan's hits, only the conversation's live chunks. A scope too small a share of the
    index (more than WITHIN_MOST neighbours) is scanned exactly."""
    from convmem.store import ann

    with Memory.open(
        str(tmp_path / "m.db"),
        embedder=HashingEmbedder(),
        marker=KeepAllMarker(),
        workers=0,
        ann_min_rows=0,
    ) as memory:
        _long_conversation(memory)
        spec = parse_filters({"conversation_id": "long"}, tenant=memory.tenant)
        query = np.asarray(memory.embedding.embed_query_array(["ferry tickets"])[0], np.float32)
        rows = dict(memory.store._db().execute("SELECT rowid, chunk_id FROM chunks").fetchall())

        def nearest(limit: int) -> dict[str, float]:
            memory.store.SCOPE_SCAN_ROWS = limit
            found = memory.searcher._vector_candidates(memory.tenant, spec, query, 20)
            return {rows[rowid]: score for rowid, score in found}

        scanned = nearest(10_000)
        calls: list[int] = []
        within = ann.AnnIndex.search_within

        def counted(self: ann.AnnIndex, *args: object, **kwargs: object) -> object:
            found = within(self, *args, **kwargs)  # type: ignore[arg-type]
            calls.append(-1 if found is None else len(found))
            return found

        monkeypatch.setattr(ann.AnnIndex, "search_within", counted)
        from_index = nearest(5)
        assert calls == [20]
        # the same nearest chunks at the same cosines, as the index keeps them (the
        # twentieth may tie with the twenty-first: both say "ferry" alike)
        best = sorted(scanned, key=lambda name: -scanned[name])[:10]
        assert len(scanned) == len(from_index) == 20
        assert all(abs(from_index[name] - scanned[name]) < 1e-3 for name in best)
        assert all(name.startswith("long") for name in scanned)
        monkeypatch.setattr(ann, "WITHIN_MOST", 10)
        assert nearest(5) == scanned and calls[-1] == -1


def test_turn_vector_blobs_are_half_precision_and_read_back_as_float32() -> None:
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((5, 64)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    blob = matrix_bytes(rows)
    assert blob[:4] == HALF_TAG and len(blob) == 4 + rows.size * 2
    back = matrix_rows(blob, 64)
    assert back.dtype == np.float32 and back.shape == (5, 64)
    assert np.abs(back @ rows.T - rows @ rows.T).max() < 1e-3
    # an untagged blob is float32 rows, as stores indexed before the tag hold them
    assert np.array_equal(matrix_rows(rows.tobytes(), 64), rows)
    # values float16 cannot hold stay float32, untagged, rather than turn into inf
    large = rows * 1e6
    assert np.array_equal(matrix_rows(matrix_bytes(large), 64), large)
