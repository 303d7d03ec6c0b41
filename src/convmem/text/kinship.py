"""The people a Chinese question names by their relation to the user (我岳父, 我表姐, 室友).

"我岳父今年多大了" asked of a chat that never mentions a father-in-law has no memory to
find, however close the lines about other people's ages come. A chat that talks about
someone by relation says the word (我岳父, 老丈人…) or one of its everyday synonyms
(:mod:`convmem.text.synonyms`: 我妈 for 妈妈), so a relation the whole conversation never
says is, like an unknown name, a sign that the question is about someone else's life.

Two kinds of relation are left out, because chat names them more often than it says the
relation: a partner (女朋友 is 小雨 in every line) and a child (我女儿 is 朵朵). So is a
relation of someone else (孩子奶奶, 周文斌的女儿, 她爸): the chat may know that person by
another word (孩子奶奶 is the user's 婆婆).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from convmem.text.segment import NAME_INITIALS, chinese_names, surname_opening
from convmem.text.synonyms import synonyms

__all__ = [
    "ENGLISH",
    "FAMILY",
    "RELATIONS",
    "aliases",
    "english_relations",
    "relations",
    "spellings",
]

# family, in-laws and the people of work, school and home, by generation
_LISTED = (
    "爸爸 妈妈 父亲 母亲 老爸 老妈 爷爷 奶奶 外公 外婆 姥姥 姥爷",
    "公公 婆婆 岳父 岳母 丈人 丈母娘",
    "哥哥 姐姐 弟弟 妹妹 大哥 二哥 大姐 二姐 大嫂 嫂子 弟媳 姐夫 妹夫",
    "堂哥 堂姐 堂弟 堂妹 表哥 表姐 表弟 表妹",
    "叔叔 婶婶 伯伯 伯父 伯母 舅舅 舅妈 姑姑 姑妈 姑父 姨妈 小姨 大姨 姨夫",
    "侄子 侄女 外甥 外甥女 孙子 孙女 外孙 外孙女 儿媳 儿媳妇 女婿",
    "继父 继母 干爸 干妈",
    "室友 舍友 同事 同学 师兄 师姐 师弟 师妹 导师 邻居 房东 合伙人 上司 领导 老板",
    "发小 闺蜜 网友 教练 班主任 保姆",
)
RELATIONS: frozenset[str] = frozenset(word for line in _LISTED for word in line.split())
# the people chat calls by name rather than by relation: a partner and a child
_BY_NAME = (
    "老公 老婆 丈夫 妻子 爱人 媳妇 对象 男朋友 女朋友 男友 女友 未婚夫 未婚妻 另一半 伴侣 老伴",
    "儿子 女儿 闺女 大儿子 小儿子 大女儿 小女儿",
)
FAMILY: frozenset[str] = frozenset(word for line in _BY_NAME for word in line.split())
# how a question calls a partner by the children (孩子她爸 for 老公): looked up for names
_BY_CHILDREN = "孩子她爸 孩子他爸 孩子爸爸 孩子她妈 孩子他妈 孩子妈妈"
# between a relation and the name it introduces: 我未婚夫叫顾晨, 女儿小名叫朵朵, 室友：黄晓东
_INTRODUCES = re.compile(r"^(?:叫做|叫|是|名叫|名字叫|小名叫|小名|大名叫|大名|[，,：:\s])*")
_DOUBLED = re.compile(r"^([\u4e00-\u9fff])\1")
_AFTER_CALLED = re.compile(r"^[\u4e00-\u9fff]{2,3}(?=[，,。.！!？?、\s]|$)")
# someone else's relation: the word right before it is a person other than the user
_OF_ANOTHER = re.compile(r"(?:孩子|儿子|女儿|闺女|老公|老婆|爱人|媳妇|[他她它]|[^我]的)的?$")

# The relations an English question names of the user ("my mother-in-law", "my cousin"), as
# the relations of RELATIONS a Chinese chat says them by. English says less than Chinese: a
# cousin is any of eight, a mother-in-law a husband's mother or a wife's. A partner and a
# child are left out, as in Chinese.
ENGLISH: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("mom", "mum", "mother", "mommy", "mama"), ("妈妈",)),
    **dict.fromkeys(("dad", "father", "daddy", "papa"), ("爸爸",)),
    "parents": ("父母",),
    "folks": ("父母",),
    **dict.fromkeys(("grandma", "grandmother", "granny"), ("奶奶", "外婆")),
    **dict.fromkeys(("grandpa", "grandfather", "granddad", "grandad"), ("爷爷", "外公")),
    "grandparents": ("爷爷", "奶奶"),
    "mother-in-law": ("婆婆", "岳母"),
    "father-in-law": ("公公", "岳父"),
    "in-laws": ("婆婆", "公公", "岳父", "岳母"),
    **dict.fromkeys(("brother", "bro"), ("哥哥", "弟弟", "大哥", "二哥")),
    **dict.fromkeys(("sister", "sis"), ("姐姐", "妹妹", "大姐", "二姐")),
    "sister-in-law": ("大嫂", "嫂子", "弟媳"),
    "brother-in-law": ("姐夫", "妹夫"),
    "cousin": ("堂哥", "堂姐", "堂弟", "堂妹", "表哥", "表姐", "表弟", "表妹"),
    **dict.fromkeys(
        ("aunt", "auntie", "aunty"),
        ("婶婶", "伯母", "舅妈", "姑姑", "姑妈", "姨妈", "小姨", "大姨"),
    ),
    "uncle": ("叔叔", "伯伯", "伯父", "舅舅", "姑父", "姨夫"),
    "nephew": ("侄子", "外甥"),
    "niece": ("侄女", "外甥女"),
    "grandson": ("孙子", "外孙"),
    "granddaughter": ("孙女", "外孙女"),
    "son-in-law": ("女婿",),
    "daughter-in-law": ("儿媳", "儿媳妇"),
    "stepfather": ("继父",),
    "stepmother": ("继母",),
    "godfather": ("干爸",),
    "godmother": ("干妈",),
    **dict.fromkeys(("roommate", "flatmate", "housemate"), ("室友", "舍友")),
    **dict.fromkeys(("colleague", "coworker", "co-worker", "workmate"), ("同事",)),
    **dict.fromkeys(("classmate", "schoolmate"), ("同学",)),
    **dict.fromkeys(("boss", "supervisor", "manager"), ("老板", "领导", "上司")),
    **dict.fromkeys(("neighbor", "neighbour"), ("邻居",)),
    **dict.fromkeys(("landlord", "landlady"), ("房东",)),
    "business partner": ("合伙人",),
    "coach": ("教练",),
    "homeroom teacher": ("班主任",),
    **dict.fromkeys(("nanny", "babysitter"), ("保姆",)),
}
# "my" and the relation right after it (my mother-in-law, my older brother, my mom's): a
# relation after a possessive other than "my" (my daughter's teacher) is someone else's
_MY_RELATION = re.compile(
    r"\bmy (?:(?:older|elder|younger|little|big|baby|old|maternal|paternal|grand) )?("
    + "|".join(sorted((re.escape(word) for word in ENGLISH), key=len, reverse=True))
    + r")(?![\w-])",
    re.IGNORECASE,
)


def english_relations(question: str) -> list[list[str]]:
    """For each relation an English question names of the user (:data:`ENGLISH`: "my
    mother-in-law", "my cousin's"), every word a Chinese chat may say it by: its Chinese
    relations and their :func:`spellings`, each once."""
    found: list[list[str]] = []
    for match in _MY_RELATION.finditer(question):
        words = list(
            dict.fromkeys(
                spelled for word in ENGLISH[match.group(1).lower()] for spelled in spellings(word)
            )
        )
        if words not in found:
            found.append(words)
    return found


# the relations a question says in their spoken form (我妈 for 妈妈, 我爸妈 for 父母); not
# 我奶, 我姑 or 我爷, which open other words (我奶茶店, 我姑娘: my daughter)
_SPOKEN_AS = {
    "我爸": "爸爸",
    "我妈": "妈妈",
    "我哥": "哥哥",
    "我姐": "姐姐",
    "我弟": "弟弟",
    "我妹": "妹妹",
    "咱爸": "爸爸",
    "咱妈": "妈妈",
    "我舅": "舅舅",
    "我叔": "叔叔",
    "我婶": "婶婶",
    "我嫂": "嫂子",
    "我爸妈": "父母",
    "爸妈": "父母",
    "父母": "父母",
}
# a relation that a chat also says by its members: parents are 我爸 and 我妈 as well
_MEMBERS = {"父母": ("爸爸", "妈妈")}
# each relation's spoken forms (哥哥: 我哥), read by spellings
_SPOKEN_FORMS = {
    meant: tuple(word for word, of in _SPOKEN_AS.items() if of == meant and word != meant)
    for meant in set(_SPOKEN_AS.values())
}
# the words looked for in a question, longest first (外孙女 before 外孙), sorted once
_RELATIONS_FIRST = tuple(sorted(RELATIONS | set(_SPOKEN_AS), key=lambda word: (-len(word), word)))
_NAMED_FIRST = tuple(
    sorted(
        RELATIONS | FAMILY | set(_SPOKEN_AS) | set(_BY_CHILDREN.split()),
        key=lambda word: (-len(word), word),
    )
)


def relations(question: str) -> list[str]:
    """The relations of :data:`RELATIONS` a question names of the user, longest first and
    each once (外孙女, not 外孙 again), a spoken form as its relation (我妈: 妈妈; 我爸妈:
    父母, not 爸爸 too)."""
    found = _named(question, _RELATIONS_FIRST)
    return list(dict.fromkeys(_SPOKEN_AS.get(word, word) for word in found))


def _named(question: str, words: Sequence[str]) -> list[str]:
    """Those of ``words`` (longest first) the question names of the user, each once and
    none inside another's place in the question (外孙女, not 外孙 again; 爸妈 of 我爸妈,
    not 我爸 too)."""
    found: list[str] = []
    taken: list[tuple[int, int]] = []
    for word in words:
        at = question.find(word)
        if at < 0 or any(word in other for other in found):
            continue
        end = at + len(word)
        if any(at < stop and start < end for start, stop in taken):
            continue
        if _OF_ANOTHER.search(question[:at]):
            continue
        found.append(word)
        taken.append((at, end))
    return found


def spellings(relation: str) -> list[str]:
    """The words a chat may say the relation by: itself, its synonyms, its spoken forms
    (我哥 for 哥哥) and, for a relation of several people (父母), its members' spellings."""
    own = [relation, *sorted({*synonyms(relation), *_SPOKEN_FORMS.get(relation, ())})]
    members = [word for member in _MEMBERS.get(relation, ()) for word in spellings(member)]
    return list(dict.fromkeys([*own, *members]))


def aliases(question: str, texts: Iterable[str]) -> list[str]:
    """The names ``texts`` introduce for the people a question names by relation: "我未婚夫
    多高" and a line 我未婚夫叫顾晨 give 顾晨, so the lines that only say 顾晨 (顾晨一米八二)
    can be found. A name follows its relation (or one of its spellings), after at most 叫,
    是 or a comma: a personal name (:func:`~convmem.text.segment.chinese_names`), a doubled
    one (女儿欣欣) or what follows 叫 up to the clause's end. Names the question holds
    already are left out."""
    wanted = [
        spelling
        for word in _named(question, _NAMED_FIRST)
        for spelling in spellings(_SPOKEN_AS.get(word, word))
    ]
    if not wanted:
        return []
    openings: dict[str, bool] = {}  # what follows a spelling -> whether 叫 came before it
    for text in texts:
        for spelling in wanted:
            start = text.find(spelling)
            while start >= 0:
                rest = text[start + len(spelling) : start + len(spelling) + 12]
                gap = _INTRODUCES.match(rest)  # matches everywhere, if only nothing
                skipped = gap.group() if gap else ""
                after = rest[len(skipped) :]
                if after:
                    openings[after] = openings.get(after, False) or "叫" in skipped
                start = text.find(spelling, start + 1)
    # jieba's tagger once over every opening that can start a name (a common surname, 小,
    # 阿 or 老): its cost is per call, not per character
    tagged = set(
        chinese_names("。".join(after[:4] for after in openings if after[:1] in NAME_INITIALS))
    )
    found: dict[str, None] = {}
    for after, called in openings.items():
        name = _name_at(after, called=called, tagged=tagged)
        if name and name not in question:
            found[name] = None
    return list(found)


def _name_at(text: str, *, called: bool, tagged: set[str]) -> str | None:
    """The name ``text`` opens with, if any: one of the ``tagged`` names, a doubled
    character, what follows 叫, or a common surname and the next character."""
    for name in sorted(tagged, key=len, reverse=True):
        if text.startswith(name):
            return name
    doubled = _DOUBLED.match(text)
    if doubled:
        return doubled.group()
    if called:
        match = _AFTER_CALLED.match(text)
        if match:
            return match.group()
    return surname_opening(text)
