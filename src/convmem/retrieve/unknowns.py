"""What a question asks that its memory may not know: the question features of "no memory".

A calibrated score (:mod:`convmem.retrieve.calibration`) reads, beside each hit's own
evidence, what the question asks and whether the searched scope says it at all: a name
(:func:`unknown_name`), a relation of the user (:func:`unknown_relation`) or of someone it
names (:func:`unknown_kin`) that the conversation never mentions, general knowledge
nothing in it is about (:func:`general_question` and its cross-language forms), and the
share and rarity of its most specific words the scope never says (:func:`absent_share`,
:func:`absent_rarity`). Each reads the scope's statistics
(:meth:`~convmem.store.lexical.LexicalStats.scope_terms`: the number of chunks and each
term's count, or within a tenant whether it says the term) or the candidates' lines, never
another tenant's memory. None of them ranks hits: they only tell "no memory" apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from convmem.text import (
    address_names,
    background_idf,
    chinese_names,
    is_mostly_cjk,
    keywords,
    tokenize,
    word_frequency,
    words,
)
from convmem.text.bilingual import question_terms, topic_unsaid
from convmem.text.dates import MONTHS
from convmem.text.kinship import FAMILY, RELATIONS, english_relations, relations, spellings
from convmem.text.synonyms import spelling

__all__ = [
    "GENERAL_MARGIN",
    "GENERAL_MARGIN_FOLLOW_UP",
    "GENERAL_MARGIN_SAID",
    "NAMES",
    "RARITY_SCALE",
    "SPECIFIC_WORDS",
    "absent_rarity",
    "absent_share",
    "english_relation_terms",
    "general_question",
    "general_question_english",
    "general_question_of_english",
    "kin_of_named",
    "name_terms",
    "name_variants",
    "names",
    "names_anyone",
    "people",
    "relation_terms",
    "specific_terms",
    "specific_words",
    "synonym_terms",
    "unknown_kin",
    "unknown_name",
    "unknown_relation",
]

#: How many of the question's most specific words the ``absent`` feature looks up.
SPECIFIC_WORDS = 2
#: How many of the question's names the ``unknown_name`` feature looks up.
NAMES = 3
#: How many of a Chinese question's last characters :func:`names` tags for personal names.
NAME_TEXT = 600
# a Latin-script word, accented letters included (José, Zoë, Müller)
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f][A-Za-z0-9\u00c0-\u024f]*")
# Capitalised, but dates rather than names (a chunk's time prefix writes them as numbers).
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CALENDAR = frozenset(MONTHS + tuple(month[:3] for month in MONTHS) + ("sept",) + _DAYS)
_SENTENCE_ENDS = ".!?:;\"'“‘。！？：；"


def names(query: str) -> list[str]:
    """Capitalised Latin-script words of three letters or more that do not open a sentence
    and are no month or weekday (Jon, Peru, LGBTQ): the names of an English question. In
    a Chinese question a capital is a name wherever it stands (Jon 喜欢吃什么), and so is a
    Chinese personal name (:func:`~convmem.text.chinese_names`: 林峰, 小雯)."""
    found: list[str] = []
    chinese = is_mostly_cjk(query)
    for match in _LATIN_WORD.finditer(query):
        word = match.group()
        before = query[: match.start()].rstrip()
        opens = not chinese and (not before or before[-1] in _SENTENCE_ENDS)
        if (
            not opens
            and word[0].isupper()
            and len(word) >= 3
            and word.lower() not in _CALENDAR
            and word not in found
        ):
            found.append(word)
    if chinese:
        found.extend(name for name in _personal_names(query) if name not in found)
        found.extend(name for name in address_names(query) if name not in found)
    return found


def _personal_names(query: str) -> list[str]:
    """:func:`~convmem.text.chinese_names` of the question's newest :data:`NAME_TEXT`
    characters: jieba's tagger costs up to 0.5 ms a character, and a question is shorter
    (MADial's longest Chinese window has 290)."""
    return chinese_names(query[-NAME_TEXT:])


def specific_words(query: str) -> list[str]:
    """The question's most specific words: its keywords by background idf
    (:func:`~convmem.text.segment.background_idf`; stopwords, single characters and digits
    never count), at most :data:`SPECIFIC_WORDS`."""
    return keywords(words(query), limit=SPECIFIC_WORDS)


def specific_terms(query: str) -> list[str]:
    """The search tokens of the question's most specific words (:func:`specific_words`)."""
    return _search_tokens(specific_words(query))


def name_terms(query: str, named: Sequence[str] | None = None) -> list[str]:
    """The search tokens of the question's names (:func:`names`, or ``named`` where the
    caller has them already), at most :data:`NAMES`. A Chinese name's token is its first
    two characters (a character bigram, which every Chinese run of a chunk is indexed by):
    jieba may cut the name differently in a line (张晓明 → 张晓 + 明) or take a following
    character into it (陈静开的店 → 陈静开)."""
    found = names(query) if named is None else named
    return _search_tokens([_name_key(name) for name in found])[:NAMES]


def _name_key(name: str) -> str:
    return name[:2] if is_mostly_cjk(name) else name


def _search_tokens(found: Sequence[str]) -> list[str]:
    """Each word's search token (the first its tokenizer gives), each once, in order."""
    terms: list[str] = []
    for word in found:
        tokens = tokenize(word)
        if tokens and tokens[0] not in terms:
            terms.append(tokens[0])
    return terms


# A title's first character and those of the titles chat uses for the same person
# (张医生 / 张大夫, 周总 / 周经理 / 周老板, 王阿姨 / 王姨, 陈师傅 / 陈工)
_TITLE_VARIANTS = {
    "医": "大",
    "大": "医",
    "总": "经老",
    "经": "总",
    "阿": "姨",
    "姨": "阿",
    "工": "师",
    "师": "工",
}


def name_variants(terms: Sequence[str]) -> dict[str, list[str]]:
    """For each Chinese name key of ``terms`` (:func:`name_terms`) whose second character
    opens a title, the keys of the same surname with the other titles chat uses for the
    person (张医: 张大): :func:`unknown_name` counts the name as said where one is."""
    return {
        term: [term[0] + other for other in _TITLE_VARIANTS[term[1]]]
        for term in terms
        if len(term) == 2 and is_mostly_cjk(term) and term[1] in _TITLE_VARIANTS
    }


def unknown_name(
    terms: Sequence[str],
    scope: tuple[int, Mapping[str, int]] | None,
    variants: Mapping[str, Sequence[str]] | None = None,
) -> float:
    """The ``unknown_name`` feature: 1.0 when one of the question's names
    (:func:`name_terms`) occurs in none of the scope's chunks, nor one of its ``variants``
    (:func:`name_variants`); 0.0 otherwise, and without scope statistics or for an empty
    scope."""
    if not terms or scope is None or scope[0] == 0:
        return 0.0
    counts = scope[1]
    return 1.0 if any(_unsaid(term, counts, variants or {}) for term in terms) else 0.0


def relation_terms(query: str) -> list[list[tuple[str, ...]]]:
    """For each relation a Chinese question names of the user
    (:func:`~convmem.text.kinship.relations`: 我岳父, 我表姐), its spellings
    (:func:`~convmem.text.kinship.spellings`) as the character bigrams each is indexed by:
    a chunk says a spelling when it holds all of that spelling's bigrams."""
    if not is_mostly_cjk(query):
        return []
    return [_bigrams(spellings(relation)) for relation in relations(query)]


def english_relation_terms(query: str) -> list[list[tuple[str, ...]]]:
    """For each relation an English question names of the user
    (:func:`~convmem.text.kinship.english_relations`: my mother-in-law, my cousin), the
    Chinese words a chat may say it by, as :func:`relation_terms` gives them: read against a
    Chinese memory by :func:`unknown_relation` ("Where does my mother-in-law live?" of a
    chat that never says 婆婆 or 岳母)."""
    if is_mostly_cjk(query):
        return []
    return [_bigrams(words) for words in english_relations(query)]


def _bigrams(spelled: Sequence[str]) -> list[tuple[str, ...]]:
    """Each word's character bigrams, the tokens a chunk indexes it by."""
    return [tuple(word[i : i + 2] for i in range(len(word) - 1)) for word in spelled]


def unknown_relation(
    relations: Sequence[Sequence[tuple[str, ...]]], scope: tuple[int, Mapping[str, int]] | None
) -> float:
    """1.0 when the conversation says none of the spellings of one of the question's
    relations (:func:`relation_terms`): it asks about someone the chat never mentions, as
    ``unknown_name`` for a name, and reads that feature's weight; 0.0 otherwise, and
    without scope statistics or for an empty scope."""
    if not relations or scope is None or scope[0] == 0:
        return 0.0
    counts = scope[1]
    for spelled in relations:
        if not any(all(counts.get(bigram, 0) for bigram in word) for word in spelled):
            return 1.0
    return 0.0


# the relations of someone else and every word chat says them by (太太 of 老婆, 爸妈 of 父母,
# 儿子 and 女儿 of 孩子), longest first (外孙女 before 外孙): partners and children too. Each
# maps to the words a chat that knows that person says near the name.
def _kin_spelled() -> dict[str, tuple[str, ...]]:
    said: dict[str, set[str]] = {}
    wider = {"孩子": ("儿子", "女儿", "闺女"), "老师": (), "医生": ()}
    for relation in sorted(RELATIONS | FAMILY | {"父母", *wider}):
        words = set(spellings(relation))
        for member in wider.get(relation, ()):
            words.update(spellings(member))
        for word in words:
            if is_mostly_cjk(word) and not word.startswith(("我", "咱")):
                said.setdefault(word, set()).update(words)
    return {
        word: tuple(sorted(words, key=lambda spelled: (-len(spelled), spelled)))
        for word, words in sorted(said.items(), key=lambda item: (-len(item[0]), item[0]))
    }


_KIN_SPELLED = _kin_spelled()
# a question that opens with someone the chat calls by a word no name finder takes (郭玉兰,
# 子轩, 朵朵) and asks of their relation: the two or three characters before 的
_OPENS_WITH_PERSON = re.compile(r"^([\u4e00-\u9fff]{2,3}?)的")
_NOT_A_PERSON = tuple("我你他她它这那咱谁哪啥每各")
# ... and no common word (公司的老板, 店里的保姆: a place, whose people chat names otherwise);
# a doubled name (朵朵, 满满) is one even where the dictionary holds it
_PERSON_WORD_BELOW = 100
# how many characters may stand between 的 and the relation (朵朵的钢琴老师)
_KIN_MODIFIER = 2


def people(query: str, named: Sequence[str] | None, texts: Sequence[str]) -> list[str]:
    """The people a Chinese question names: its :func:`names` (or ``named``), and two or
    three characters before 的 that open it where ``texts`` say them and no name finder
    takes them (郭玉兰的老伴, 子轩的班主任)."""
    found = list(names(query) if named is None else named)
    opening = _OPENS_WITH_PERSON.match(query)
    if opening and not any(opening.group(1) in name or name in opening.group(1) for name in found):
        person = opening.group(1)
        if (
            not person.startswith(_NOT_A_PERSON)
            and person not in _KIN_SPELLED
            and (
                (len(person) == 2 and person[0] == person[1])
                or word_frequency(person) < _PERSON_WORD_BELOW
            )
            and any(_name_key(person) in text for text in texts)
        ):
            found.append(person)
    return found


def kin_of_named(
    query: str, named: Sequence[str] | None = None, texts: Sequence[str] = ()
) -> list[tuple[str, tuple[str, ...]]]:
    """For each relation a Chinese question names of someone it names (苏婷的老公, 老宋的老伴,
    婷婷男朋友, 朵朵的钢琴老师): the person's name key (:func:`name_terms`) and the words a
    chat says the relation by (:func:`~convmem.text.kinship.spellings`: 老公, 丈夫, 爱人...;
    a child as 儿子 or 女儿 too). ``named``: the question's :func:`names` where the caller
    has them already. A question that opens with two or three characters before 的 that no
    name finder takes (郭玉兰的老伴, 子轩的班主任) names that person where ``texts`` say
    them."""
    if not is_mostly_cjk(query) or not any(word in query for word in _KIN_SPELLED):
        return []
    out: list[tuple[str, tuple[str, ...]]] = []
    for name in people(query, named, texts):
        at = query.find(name)
        rest = query[at + len(name) :] if at >= 0 else ""
        owned = rest[:1] in "的他她"
        rest = rest[1:] if owned else rest
        for word, said in _KIN_SPELLED.items():
            where = rest.find(word)
            if where == 0 or (owned and 0 < where <= _KIN_MODIFIER and rest[:where].isalpha()):
                out.append((_name_key(name), said))
                break
    return out


def unknown_kin(kin: Sequence[tuple[str, Sequence[str]]], texts: Sequence[str]) -> float:
    """1.0 when no candidate text (``texts``: the candidate chunks') says a person the
    question names together with the relation it asks of them (:func:`kin_of_named`):
    "苏婷的老公是做什么的" of a chat that names 苏婷 but never her husband asks about someone
    the chat never mentions, as ``unknown_name`` for a name (and reads its weight). A chat
    that knows him says so near her name (苏婷她老公, 苏婷的丈夫), and such a chunk matches
    both words of the question, so it is among the candidates. The relations of the user's
    own people (孩子奶奶) are left to :func:`unknown_relation`, which leaves them out."""
    for key, spelled in kin:
        if not any(key in text and any(word in text for word in spelled) for text in texts):
            return 1.0
    return 0.0


# A question that asks how to do something or what something is (怎么做番茄炒蛋, 什么是区块链,
# 咖啡因对身体有什么影响) ...
_HOW_OR_WHAT = re.compile(
    r"^(?:怎么|如何|怎样|为什么|为啥)|什么是|是什么意思|有什么(?:影响|区别|作用|好处|坏处)"
)
# ... and says nothing of anyone: no person (我, 你, 他), no one pointed at (那个, 这家, 上次),
# no Latin word (a name or a product)
_PERSONAL = re.compile(
    r"[我你您咱俺他她]|[那这](?:个|家|次|位|天|回|件|只|辆|本|部|所|条|张|台|趟|场|款)"
    r"|上次|上回|之前|那时|当时|后来|[A-Za-z]"
)
# ... which the banks' margin reads more narrowly (a part of _PERSONAL): "这个成语", "这种病"
# point at what the question itself says, and a lone capital is part of a word (维生素D, B超)
_PERSONAL_MEANT = re.compile(
    r"[我你您咱俺他她]|那(?:个|家|次|位|天|回|件|只|辆|本|部|所|条|张|台|趟|场|款)"
    r"|上次|上回|之前|那时|当时|后来|[A-Za-z]{2,}"
)
_KIN = RELATIONS | FAMILY


# An English question that asks how to do something or what something is, the shape of
# _HOW_OR_WHAT in English (怎么/如何: how do I, how to; 为什么: why; 什么是: what is;
# 是什么意思: what does ... mean) ...
_HOW_OR_WHAT_EN = re.compile(
    r"^(?:how (?:do|can|could|should|would) (?:i|you|one|we)\b|how (?:does|to)\b|why\b"
    r"|what (?:is|are)\b|what's\b"
    r"|what does .+ mean\b)",
    re.IGNORECASE,
)
# ... and says nothing of anyone (past the opening "How do I")
_PERSONAL_EN = re.compile(r"\b(?:i|me|my|mine|we|us|our|ours|you|your|yours)\b", re.IGNORECASE)


def general_question_english(
    query: str, texts: Sequence[str], tokens: Mapping[str, Sequence[str]] | None = None
) -> float:
    """1.0 for an English question of general knowledge asked of memory in Chinese: the
    shape of :func:`general_question` in English (How do I bake bread? What is
    photosynthesis?), nothing said of anyone past its opening and no name, and none of its
    words said in ``texts`` (the candidates' lines:
    :func:`~convmem.text.bilingual.topic_unsaid`). "What's the wifi password?" of a chat
    that gave it says 密码, so it is memory. 0.0 otherwise. ``tokens``: the search tokens
    the index worker stored for the texts, by text."""
    opening = _HOW_OR_WHAT_EN.match(query.strip())
    if opening is None or _PERSONAL_EN.search(query.strip()[opening.end() :]):
        return 0.0
    terms = question_terms(query)
    if terms.names:
        return 0.0
    return 1.0 if topic_unsaid(terms, texts, tokens) else 0.0


def _of_anyone(query: str) -> bool:
    """Whether a Chinese question says something of someone: a person (我, 他), one
    pointed at (那个), a Latin word, a relation or a name (林峰, 马老师)."""
    return bool(_PERSONAL.search(query)) or _names_someone(query)


def names_anyone(query: str) -> bool:
    """Whether a question says something of someone, as the general-question rule's margin
    reads it (:func:`general_question`): a person (我, 他), one pointed at (那个, 上次), a
    Latin word, a relation or a name. An English question is always someone's here."""
    if not is_mostly_cjk(query):
        return True
    return bool(_PERSONAL_MEANT.search(query)) or _names_someone(query)


def _names_someone(query: str, named: Sequence[str] | None = None) -> bool:
    """Whether a Chinese question names a relation or a person (林峰, 马老师); ``named``: the
    question's :func:`names` where the caller has them already (jieba's tagger is the slow
    part of reading them)."""
    if any(word in query for word in _KIN):
        return True
    if named is not None:
        return bool(named)
    return bool(_personal_names(query) or address_names(query))


def general_question_of_english(
    query: str, texts: Sequence[str], tokens: Mapping[str, Sequence[str]] | None = None
) -> float:
    """1.0 for a Chinese question asked of memory in English that says nothing of anyone
    (no 我, 他, relation, name, Latin word or 那个) and whose two most specific words no
    candidate line (``texts``) says in English (:func:`~convmem.text.bilingual.topic_unsaid`:
    珠穆朗玛峰 has no Everest in a chat about painting). The Chinese rule
    (:func:`general_question`) also asks for its "how / what is" shape, since its
    question words are looked up in the chat's own language, where a paraphrase can hide;
    across languages the dictionary's heads already stand for the paraphrases. 0.0
    otherwise. ``tokens``: the search tokens the index worker stored for the texts, by
    text (the names are looked for last: jieba's tagger is the slow part)."""
    if not is_mostly_cjk(query) or _PERSONAL.search(query):
        return 0.0
    specific = " ".join(specific_words(query))
    if not specific or not topic_unsaid(question_terms(specific), texts, tokens):
        return 0.0
    return 0.0 if _of_anyone(query) else 1.0


#: How much closer to questions of general knowledge than to questions about a user's
#: memory (:func:`~convmem.retrieve.background.general_margin`) a question without the how
#: or what shape must come for :func:`general_question`.
GENERAL_MARGIN = 0.02
#: The margin a question needs when the conversation says some of its specific words.
GENERAL_MARGIN_SAID = 0.05
#: The margin a follow-up of a general question needs ("马拉松全程是多少公里？半程呢？": the
#: second part is general, the first follows it): anything not clearly about memory.
GENERAL_MARGIN_FOLLOW_UP = -0.05


def general_question(
    query: str,
    terms: Sequence[str],
    scope: tuple[int, Mapping[str, int]] | None,
    margin: Callable[[], float] | None = None,
    follow_up: bool = False,
    named: Sequence[str] | None = None,
) -> float:
    """1.0 for a Chinese question of general knowledge, which reads ``unknown_name``'s
    weight; 0.0 otherwise, and without scope statistics or for an empty scope. Either it
    asks how to do something or what something is (怎么做番茄炒蛋, 什么是区块链), says
    nothing of anyone (no 我, 他, relation, name, 那个 or 这个, Latin letter) and the
    conversation says none of its most specific words (:func:`specific_terms`): "怎么联系
    物业" asked of a chat that gave the property office's number says 物业, so it is memory.
    Or, whatever its shape, ``margin`` (the question's
    :func:`~convmem.retrieve.background.general_margin`, computed only when the rest holds)
    says it comes closer to questions of general knowledge than to questions about a user's
    memory, by :data:`GENERAL_MARGIN` where the conversation says none of its specific words
    (一场足球比赛正常是多少分钟, 秘鲁的首都是哪里) and by :data:`GENERAL_MARGIN_SAID` where it says
    some but not all; it says nothing of anyone, read more narrowly (这个成语 and 维生素D
    are no one). ``follow_up``: the question is a part of one whose other part asks general
    knowledge; a margin above :data:`GENERAL_MARGIN_FOLLOW_UP` is enough. ``named``: the
    question's :func:`names` where the caller has them already."""
    if not terms or scope is None or scope[0] == 0 or not is_mostly_cjk(query):
        return 0.0
    # someone for both readings (我, 那家, a Latin word, a relation, a name); then 这个 or a
    # lone capital, someone for the shape only
    if _PERSONAL_MEANT.search(query) or _names_someone(query, named):
        return 0.0
    anyone = bool(_PERSONAL.search(query))
    if anyone and margin is None:
        return 0.0
    counts = scope[1]
    said = sum(1 for term in terms if counts.get(term, 0))
    if said == len(terms):
        return 0.0
    if not said and not anyone and _HOW_OR_WHAT.search(query):
        return 1.0
    if margin is None:
        return 0.0
    if follow_up:
        return 1.0 if margin() > GENERAL_MARGIN_FOLLOW_UP else 0.0
    return 1.0 if margin() > (GENERAL_MARGIN if not said else GENERAL_MARGIN_SAID) else 0.0


def synonym_terms(
    terms: Sequence[str], synonyms: Mapping[str, Sequence[str]]
) -> dict[str, list[str]]:
    """Each of ``terms`` (the search tokens of the question's specific words) that is a
    word of ``synonyms`` (:func:`~convmem.text.synonyms.synonym_groups` of the question),
    with the search token of each of its synonyms that is one token (老婆 for 太太; not
    孩子他妈, whose first token 孩子 is no synonym)."""
    out: dict[str, list[str]] = {}
    for word, others in synonyms.items():
        tokens = spelling(word)
        if not tokens or tokens[0] not in terms:
            continue
        for other in others:
            spelled = spelling(other)
            if len(spelled) == 1:
                out.setdefault(tokens[0], []).extend(spelled)
    return out


def _unsaid(term: str, counts: Mapping[str, int], synonyms: Mapping[str, Sequence[str]]) -> bool:
    return not counts.get(term, 0) and not any(
        counts.get(other, 0) for other in synonyms.get(term, ())
    )


def absent_share(
    terms: Sequence[str],
    scope: tuple[int, Mapping[str, int]] | None,
    synonyms: Mapping[str, Sequence[str]] | None = None,
) -> float:
    """The ``absent`` feature: 1 / :data:`SPECIFIC_WORDS` for each of the question's most
    specific words (:func:`specific_terms`) that none of the scope's chunks holds, nor one
    of its ``synonyms`` (:func:`synonym_terms`); 0.0 without scope statistics (``scope``:
    the number of chunks and each term's count,
    :meth:`~convmem.store.lexical.LexicalStats.scope_terms`) or for an empty scope."""
    if not terms or scope is None or scope[0] == 0:
        return 0.0
    counts = scope[1]
    return sum(1 for term in terms if _unsaid(term, counts, synonyms or {})) / SPECIFIC_WORDS


#: :func:`absent_rarity` is the absent words' summed background idf over this (a rare
#: Chinese word's idf is 10-14): about 0.5-0.7 for one rare absent word.
RARITY_SCALE = 20.0


def absent_rarity(
    query: str,
    scope: tuple[int, Mapping[str, int]] | None,
    synonyms: Mapping[str, Sequence[str]] | None = None,
) -> float:
    """The ``rarity`` feature: the background idf
    (:func:`~convmem.text.segment.background_idf`) of each of the question's most
    specific words (:func:`specific_words`) that none of the scope's chunks holds, summed,
    over :data:`RARITY_SCALE`; 0.0 without scope statistics or for an empty scope (as
    :func:`absent_share`, whose counts it reads: the words' search tokens are its terms)."""
    if scope is None or scope[0] == 0:
        return 0.0
    counts = scope[1]
    total = 0.0
    for word in specific_words(query):
        tokens = tokenize(word)
        if tokens and _unsaid(tokens[0], counts, synonyms or {}):
            total += background_idf(word)
    return total / RARITY_SCALE
