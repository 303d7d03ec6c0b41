"""Tokenisation for lexical search and hashed embeddings, Chinese-first.

One function, :func:`tokenize`, is used for both documents and queries so the two sides
always agree. Text is folded with NFKC and casefolded; runs of CJK characters go through
jieba's search-mode segmentation (which also emits the shorter words inside long ones),
everything else splits into letter/digit words. Stop words are dropped. Search tokens
also carry the character bigrams of each CJK run, so that differently segmented
paraphrases and words jieba does not know ("冰淇淋店" / "淇淋") still meet. Lines are
segmented independently and cached, so a turn that appears in several overlapping chunks
is segmented once.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import re
import threading
import unicodedata
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

from convmem.text.cache import TextCache, cached_tokens

__all__ = [
    "NAME_INITIALS",
    "TOKENIZER_VERSION",
    "address_names",
    "background_idf",
    "chinese_names",
    "fold",
    "is_place",
    "keywords",
    "load_user_dict",
    "stem",
    "surname_opening",
    "tokenize",
    "tokenizer_signature",
    "word_frequency",
    "word_text",
    "words",
]

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff"
_TOKEN_RUN = re.compile(rf"([{_CJK}]+)|((?:(?![{_CJK}])[^\W_])+)")

EN_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "else",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "about",
        "from",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "have",
        "has",
        "had",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "him",
        "his",
        "she",
        "her",
        "it",
        "its",
        "they",
        "them",
        "their",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "not",
        "no",
        "so",
        "too",
        "very",
        "can",
        "could",
        "will",
        "would",
        "shall",
        "should",
        "may",
        "might",
        "must",
        "just",
        "also",
        "than",
        "into",
        "over",
        "under",
        "up",
        "down",
        "out",
        "off",
        "again",
        "further",
        "once",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "only",
        "own",
        "same",
        "s",
        "t",
        "don",
        "now",
        "ll",
        "re",
        "ve",
        "d",
        "m",
        "o",
        "y",
        "let",
        "lets",
        "im",
    ]
)
ZH_STOPWORDS = frozenset(
    [
        "的",
        "了",
        "是",
        "在",
        "和",
        "与",
        "及",
        "或",
        "也",
        "就",
        "都",
        "而",
        "又",
        "很",
        "吧",
        "吗",
        "呢",
        "啊",
        "呀",
        "嗯",
        "哦",
        "哈",
        "么",
        "着",
        "过",
        "被",
        "把",
        "让",
        "给",
        "对",
        "从",
        "向",
        "为",
        "以",
        "于",
        "之",
        "其",
        "这",
        "那",
        "这个",
        "那个",
        "这些",
        "那些",
        "一个",
        "一下",
        "一些",
        "什么",
        "怎么",
        "怎样",
        "如何",
        "哪",
        "哪里",
        "哪些",
        "谁",
        "我",
        "你",
        "他",
        "她",
        "它",
        "我们",
        "你们",
        "他们",
        "她们",
        "咱们",
        "自己",
        "有",
        "没",
        "没有",
        "不",
        "会",
        "能",
        "要",
        "想",
        "说",
        "得",
        "地",
        "个",
        "还",
        "吗",
    ]
)
STOPWORDS = EN_STOPWORDS | ZH_STOPWORDS
# Bump when search tokens change: stores rebuild their lexical index on open.
TOKENIZER_VERSION = 4
# Conversational filler: searchable, but never a chunk's topic.
KEYWORD_FILLER = frozenset(
    [
        "了解",
        "好的",
        "可以",
        "知道",
        "觉得",
        "真的",
        "非常",
        "已经",
        "请问",
        "是否",
        "现在",
        "时候",
        "因为",
        "所以",
        "但是",
        "如果",
        "然后",
        "还是",
        "就是",
        "这样",
        "那样",
        "感觉",
        "明白",
        "收到",
        "谢谢",
        "没问题",
        "当然",
        "一定",
        "应该",
        "需要",
        "可能",
        "yeah",
        "yes",
        "really",
        "know",
        "think",
        "like",
        "well",
        "good",
        "great",
        "thanks",
        "thank",
        "sure",
        "okay",
        "right",
        "got",
        "going",
        "get",
        "one",
        "also",
        "would",
    ]
)

_jieba_lock = threading.Lock()
_jieba_ready = False


def _jieba() -> Any:
    global _jieba_ready
    import jieba

    if not _jieba_ready:
        with _jieba_lock:
            if not _jieba_ready:
                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba_ready = True
    return jieba


# The hundred or so most common Chinese surnames, and the familiar prefixes of a given name
# (小雯, 阿杰, 老王): what :func:`chinese_names` asks of a word before calling it a name.
_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶"
    "程苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付傅方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺"
    "顾毛郝龚邵万钱严覃武戴莫孔向汤欧柳岳"
)
_FAMILIAR = frozenset("小阿老")
#: The characters a name :func:`chinese_names` finds can open with.
NAME_INITIALS = _SURNAMES | _FAMILIAR
_CJK_WORD = re.compile(rf"^[{_CJK}]{{2,3}}$")
_HAS_CJK = re.compile(f"[{_CJK}]")
# jieba's dictionary tags many common words as names (明白, 阳光, 老公 are "nr"); a word it
# holds at this frequency or more is taken for a common word
_COMMON_WORD = 5


@lru_cache(maxsize=1)
def _posseg() -> Any:
    """jieba's part-of-speech module (its first import loads the model, about 0.5 s)."""
    _jieba()
    import jieba.posseg

    return jieba.posseg


@functools.cache
def _tagger_chars() -> frozenset[str]:
    """The characters jieba's part-of-speech model has states for."""
    _posseg()
    from jieba.posseg.char_state_tab import P

    return frozenset(P)


def _known_to_tagger(text: str) -> str:
    """``text`` with each Chinese character the tagger has never seen read as a comma.

    The tagger's HMM tries every pair of its states on such a character (about 4 ms each:
    2,000 rare characters took 8 s), and it seldom tags one as part of a name (张彧, 李玥:
    no name either way). Over the 7,723 Chinese lines and questions of bench/data and
    MADial one result changed: 曾厝, cut from the place 曾厝垵, is no longer a name.
    """
    known = _tagger_chars()
    return "".join(ch if ch in known or not _HAS_CJK.match(ch) else "，" for ch in text)


def is_place(word: str) -> bool:
    """Whether jieba's dictionary tags ``word`` as a place name (``ns``: 杭州, 海淀区, 泰国)."""
    return bool(_posseg().dt.word_tag_tab.get(word) == "ns")


def surname_opening(text: str) -> str | None:
    """The first two characters of ``text`` when they may open a personal name that
    :func:`chinese_names` does not tag (李明哲今年三十三: jieba cuts 李明 哲): a common
    surname, then a Chinese character, the two not a common word (高兴 is not a name).
    Two characters are the bigram every mention of the name is indexed by."""
    head = unicodedata.normalize("NFKC", text[:2])
    if len(head) < 2 or head[0] not in _SURNAMES or not _HAS_CJK.match(head[1]):
        return None
    frequency = _jieba().dt.FREQ
    return head if (frequency.get(head) or 0) < _COMMON_WORD else None


def chinese_names(text: str) -> list[str]:
    """The Chinese personal names in ``text``, each once, in order: words that jieba's
    part-of-speech model tags as a person's name (``nr``) and its dictionary does not hold
    as a common word, of two or three characters that open with a common surname (林峰,
    张晓明), or of two that open with 小, 阿 or 老 (小雯, 阿杰). Conservative by design:
    a word taken for a name wrongly makes "no memory" likelier (see
    :func:`convmem.retrieve.unknowns.unknown_name`)."""
    if not _HAS_CJK.search(text):
        return []
    posseg = _posseg()
    frequency = _jieba().dt.FREQ
    found: list[str] = []
    for word, tag in posseg.lcut(_known_to_tagger(unicodedata.normalize("NFKC", text))):
        if (
            tag.startswith("nr")
            and _CJK_WORD.match(word)
            and (frequency.get(word) or 0) < _COMMON_WORD
            and (word[0] in _SURNAMES or (len(word) == 2 and word[0] in _FAMILIAR))
            and word not in found
        ):
            found.append(word)
    return found


def word_frequency(word: str) -> int:
    """How often jieba's dictionary counts ``word`` (0 for a word it does not hold): 公司
    45,604, 店里 408, 朵朵 44, 郭玉兰 0."""
    return int(_jieba().dt.FREQ.get(word) or 0)


# How chat names a person by surname: 老周, 小王, 阿珍 (as chinese_names), 周总, 王姐, and a
# surname before a title (孙教授, 马老师, 张医生, 陈工长).
_TITLES = frozenset(
    [
        "老师",
        "教授",
        "医生",
        "大夫",
        "护士",
        "经理",
        "总监",
        "主管",
        "主任",
        "师傅",
        "工长",
        "律师",
        "老板",
        "阿姨",
        "叔叔",
        "同学",
        "校长",
        "院长",
        "局长",
        "书记",
        "科长",
        "处长",
        "部长",
        "警官",
        "教练",
    ]
)
_SHORT_TITLES = frozenset("总姐哥叔婶工")
# surnames that also open a common phrase before a title (我向老师请教, 于是)
_PREPOSITIONS = frozenset("向于")
# A doubled character names a child or a pet (乐乐, 朵朵, 豆豆) unless it is a common word
# (天天, 宝宝: jieba's count of a name is under this), a laugh or sigh, or a day or a year.
_DOUBLED = re.compile(rf"([{_CJK}])\1")
_DOUBLED_COMMON = 50
_NOT_DOUBLED_NAMES = frozenset("哈嘿呵嘻嗯噢哦啊呀哇嗷年月日天时周")


def address_names(text: str) -> list[str]:
    """The ways ``text`` addresses a person by surname, each once, in order: 老周, 阿珍 (老,
    小 or 阿 before a common surname, one word for jieba), 周总, 王姐 (a surname before 总,
    姐, 哥…, one word, and no common word: 高工), 孙教授, 马老师 (a surname jieba cuts
    alone before a title), and a doubled character as children and pets are called
    (乐乐, 朵朵, one word for jieba; not 天天, 宝宝 or 哈哈: common words, laughs, days)."""
    if not _HAS_CJK.search(text):
        return []
    frequency = _jieba().dt.FREQ
    text = unicodedata.normalize("NFKC", text)
    cut = _jieba().lcut(text)
    found: list[str] = []
    for index, word in enumerate(cut):
        name = None
        if len(word) == 2 and word[0] in _FAMILIAR and word[1] in _SURNAMES:
            # jieba's dictionary holds 老李, 老王 as words (from fiction): no frequency check
            name = word
        elif (
            len(word) == 2
            and word[0] in _SURNAMES
            and word[1] in _SHORT_TITLES
            and (frequency.get(word) or 0) < _COMMON_WORD
        ):
            name = word
        elif (
            word in _SURNAMES
            and word not in _PREPOSITIONS
            and index + 1 < len(cut)
            and cut[index + 1] in _TITLES
        ):
            name = word + cut[index + 1]
        if name and name not in found:
            found.append(name)
    for word in cut:
        if (
            _DOUBLED.fullmatch(word)
            and word[0] not in _NOT_DOUBLED_NAMES
            and (frequency.get(word) or 0) < _DOUBLED_COMMON
            and word not in found
        ):
            found.append(word)
    return found


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


# Per-line results of the tokenizer, and stems; invisible to the garbage collector (a
# long-running process fills them, see convmem.text.cache).
_WORDS: TextCache[str] = TextCache(131072)
_TOKENS: TextCache[str] = TextCache(131072)
_STEMS: TextCache[str] = TextCache(262144)


def _words_line(line: str) -> list[str]:
    return cached_tokens(_WORDS, line, _segment_line)


def _segment_line(line: str) -> list[str]:
    tokens: list[str] = []
    for match in _TOKEN_RUN.finditer(_normalise(line)):
        cjk, word = match.groups()
        if cjk:
            jieba = _jieba()
            for token in jieba.lcut_for_search(cjk, HMM=True):
                if token not in STOPWORDS:
                    tokens.append(token)
        elif word and word not in STOPWORDS:
            tokens.append(word)
    return tokens


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import snowballstemmer

    return snowballstemmer.stemmer("english")


def stem(word: str) -> str:
    """Snowball (Porter 2) stem of an English word; other tokens are returned unchanged."""
    if word.isascii() and word.isalpha() and len(word) > 2:
        return _STEMS.fetch(word, _snowball)
    return word


def _snowball(word: str) -> str:
    return str(_stemmer().stemWord(word))


@lru_cache(maxsize=1)
def _t2s_table() -> dict[int, str]:
    """Traditional -> simplified characters, from OpenCC's TSCharacters (first choice)."""
    import opencc

    path = Path(opencc.__file__).parent / "dictionary" / "TSCharacters.txt"
    table: dict[int, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and len(parts[0]) == 1:
            target = parts[1].split(" ")[0]
            if len(target) == 1 and target != parts[0]:
                table[ord(parts[0])] = target
    return table


def fold(text: str) -> str:
    """Fold traditional Chinese characters to simplified (character by character)."""
    return text.translate(_t2s_table())


_CJK_RUN = re.compile(rf"[{_CJK}]{{2,}}")


def _tokenize_line(line: str) -> list[str]:
    return cached_tokens(_TOKENS, line, _tokens_of_line)


def _tokens_of_line(line: str) -> list[str]:
    folded = fold(line)
    tokens = [stem(token) for token in _words_line(folded)]
    for run in _CJK_RUN.findall(_normalise(folded)):
        tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
    return tokens


_user_dict_digest = ""


def load_user_dict(path: str | Path) -> None:
    """Add a jieba user dictionary (one word per line: ``word [freq] [tag]``) process-wide.

    Search tokens change, so stores opened afterwards rebuild their lexical index (the
    dictionary's digest is part of :func:`tokenizer_signature`).
    """
    global _user_dict_digest
    data = Path(path).read_bytes()
    _jieba().load_userdict(str(path))
    _WORDS.clear()
    _TOKENS.clear()
    _user_dict_digest = hashlib.sha256(data + _user_dict_digest.encode()).hexdigest()[:16]


def tokenizer_signature() -> str:
    """What the lexical index depends on: the tokenizer version and any user dictionary."""
    return (
        f"{TOKENIZER_VERSION}:{_user_dict_digest}" if _user_dict_digest else str(TOKENIZER_VERSION)
    )


def word_text(text: str) -> str:
    """``text`` as :func:`words` reads it (NFKC, case-folded): every word it gives is a
    substring of this, so a text without a word here cannot hold it (a cheap test before
    segmenting)."""
    return _normalise(text)


def words(text: str) -> list[str]:
    """Normalised words without stemming (jieba for Chinese): for keywords and features."""
    out: list[str] = []
    for line in text.split("\n"):
        if line:
            out.extend(_words_line(line))
    return out


def tokenize(text: str) -> list[str]:
    """Search tokens: :func:`words` with English words stemmed ("painted" -> "paint"),
    then the character bigrams of each CJK run.

    The lexical index and queries both use this; changing it means a new
    ``TOKENIZER_VERSION`` (stores rebuild their lexical index when they open).
    """
    out: list[str] = []
    for line in text.split("\n"):
        if line:
            out.extend(_tokenize_line(line))
    return out


@lru_cache(maxsize=1)
def _idf_table() -> tuple[dict[str, float], float]:
    """jieba's bundled IDF table for Chinese words (used for topic keywords)."""
    import os

    jieba = _jieba()
    path = os.path.join(os.path.dirname(jieba.__file__), "analyse", "idf.txt")
    table: dict[str, float] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for row in handle:
                parts = row.split()
                if len(parts) == 2:
                    table[parts[0]] = float(parts[1])
    except OSError:
        return {}, 10.0
    median = sorted(table.values())[len(table) // 2] if table else 10.0
    return table, median


def background_idf(word: str) -> float:
    """How rare a word is in general text, as :func:`keywords` weighs it: jieba's IDF
    for a Chinese word (the table's median for one it lacks), a length prior for others."""
    table, median = _idf_table()
    if word.isascii():
        return median * min(1.0, len(word) / 8) + 2.0
    return table.get(word, median)


def keywords(tokens: list[str], *, limit: int = 3) -> list[str]:
    """Pick up to ``limit`` topic keywords from tokens by tf-idf, first occurrence breaking ties.

    Chinese words use jieba's IDF table; other words get a length-based prior (longer,
    rarer-looking words first). Single CJK characters and digits are never keywords.
    """
    counts = Counter(tokens)
    first_seen: dict[str, int] = {}
    for position, token in enumerate(tokens):
        first_seen.setdefault(token, position)
    scored: list[tuple[float, int, str]] = []
    for token, count in counts.items():
        if token.isdigit() or len(token) < 2 or token in KEYWORD_FILLER:
            continue
        if token.isascii() and len(token) < 3:
            continue
        idf = background_idf(token)
        scored.append((-(1.0 + math.log(count)) * idf, first_seen[token], token))
    scored.sort()
    chosen: list[str] = []
    for _, _, token in scored:
        # skip a word contained in one already chosen (search mode emits both)
        if any(token in other or other in token for other in chosen):
            continue
        chosen.append(token)
        if len(chosen) == limit:
            break
    return chosen
