"""What kind of value a Chinese question asks for, and whether a line states one.

"张伟多大了" asks for an age, "胃镜约的是哪天" for a date, "婚宴定了多少桌" for a count. A
chat says many things about one person or thing in lines that look alike (张伟 plays
badminton, is 1.85 m tall, turned thirty-five, works at Huawei), and a question shares
little with the line that answers it beyond the name: "多大" is not "三十五了". The line
that holds a value of the asked kind is more likely the answer than its neighbours about
the same person: the classic answer-type match of question answering, by rule.

:func:`answer_kind` reads the kind from the question (None when it asks for none of
them, or for a kind no rule reads: a reason, a preference), and :func:`states` tells
whether a line holds a value of that kind. Only one-line Chinese questions are read: an
English chat keeps dates in its session header ("When did Caroline…" is answered by a line
without a date), which a line-level rule would get wrong, and a dialogue window asks for
no one value.

A question may also ask for a value as it is now (:func:`asks_current`: "我现在住在哪"),
after the chat said it changed; the line that says so (:func:`changes`: 搬到, 改到, 跳槽)
is the later statement, which holds the current value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from convmem.text.clean import is_mostly_cjk
from convmem.text.questions import is_window
from convmem.text.segment import is_place

__all__ = [
    "ENGLISH_KINDS",
    "KINDS",
    "answer_kind",
    "asks_current",
    "changes",
    "english_answer_kind",
    "states",
]

_NUMERAL = r"[0-9０-９零一二两三四五六七八九十百千万几半]"

# kind: (what the question says, what a line that answers it says); first match wins, so
# the narrower kinds (age, time of day, money, phone) come before date and count
KINDS: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {
    "age": (
        re.compile(r"几岁|多大(?:了|年纪|岁数)?[？?]?$|多大了|年龄|年纪|岁数|多少岁"),
        re.compile(
            rf"{_NUMERAL}+\s*(?:周岁|岁)|{_NUMERAL}十(?:出头|多了|好几)|岁了|今年\s*{_NUMERAL}+|{_NUMERAL}{{2,}}了"
        ),
    ),
    "time": (
        re.compile(r"几点|什么时间|啥时间|几时"),
        re.compile(
            rf"{_NUMERAL}{{1,3}}\s*点|\d{{1,2}}\s*[:：]\s*\d\d|[上下]午|早上|晚上|中午|凌晨|傍晚"
        ),
    ),
    "money": (
        re.compile(
            r"多少钱|花了多少|价格|价钱|多贵|预算|费用|工资|月薪|年薪|房租|租金|借了多少|欠.*多少|"
            r"额(?:是|有|为)?多少|金额|收入|成本|利润|花费|开销|学费|押金|房价|几块钱"
        ),
        re.compile(
            rf"{_NUMERAL}+(?:\.\d+)?\s*(?:元|块|万|千|百|k|K|w|W)|[¥￥$]\s*\d|"
            rf"{_NUMERAL}+(?:\.\d+)?\s*(?:美元|欧|刀)"
        ),
    ),
    "phone": (
        re.compile(r"电话|手机号|号码|联系方式|微信号|门牌号|车牌|密码|卡号"),
        re.compile(r"\d{3,}"),
    ),
    "height": (
        re.compile(r"多高|身高|个子|多重|体重|几斤|多少斤"),
        re.compile(rf"{_NUMERAL}+\s*(?:米|厘米|公分|cm|CM|斤|公斤|kg|KG)|一米{_NUMERAL}"),
    ),
    "date": (
        re.compile(
            r"哪天|哪一天|几号|几月|什么时候|啥时候|哪年|日期|生日|什么日子|星期几|礼拜几|周几"
        ),
        re.compile(
            rf"{_NUMERAL}{{1,2}}\s*月(?:\s*{_NUMERAL}{{1,3}}\s*[日号])?|{_NUMERAL}{{1,3}}\s*[日号]|"
            rf"\d{{4}}\s*年|[周礼拜星期]+[一二三四五六日天末]|初[一二三四五六七八九十]|"
            rf"[今明后前昨]天|[下上这]个?(?:周|星期|礼拜|月)|月[初底中]|年[初底]|春节|元旦|国庆|中秋|"
            rf"\d{{1,2}}[/.-]\d{{1,2}}"
        ),
    ),
    # where someone is from or lives: a line naming a place (杭州, 海淀区, 江苏南通) or a
    # street, district or town; not "在哪上班" (a workplace is a company's name)
    "place": (
        re.compile(
            r"哪里人|哪儿人|哪的人|老家|籍贯|家乡|住在哪|住哪|搬到哪|搬去哪|哪个城市|哪座城市|"
            r"哪个区|哪个省|什么地方|地址|住址"
        ),
        re.compile(r"[\u4e00-\u9fff](?:省|市|区|县|镇|村|路|街|小区|胡同)"),
    ),
    "count": (
        re.compile(
            r"几个|几位|几只|几条|几桌|几次|几家|几台|几辆|几本|几年|几天|多少个|多少人|多少桌|多少次|多久|多长时间"
        ),
        re.compile(
            rf"{_NUMERAL}+\s*(?:个|位|只|条|桌|次|家|台|辆|本|年|天|人|口|周|个月|小时|分钟|回)"
        ),
    ),
}


def answer_kind(question: str) -> str | None:
    """The kind of value a Chinese ``question`` asks for (a key of :data:`KINDS`), or None;
    None too for a dialogue window, which asks for no one value."""
    if not is_mostly_cjk(question) or is_window(question):
        return None
    for kind, (asks, _) in KINDS.items():
        if asks.search(question):
            return kind
    return None


# What an English question says when it asks for a value of a kind of :data:`KINDS`, read
# against a Chinese line (:func:`english_answer_kind`); the first that matches wins (how
# much does he weigh: a height's 斤 or kg, not an amount)
ENGLISH_KINDS: dict[str, re.Pattern[str]] = {
    "age": re.compile(r"\bhow old\b|\bwhat age\b", re.IGNORECASE),
    "time": re.compile(r"\bwhat time\b|\bat what hour\b", re.IGNORECASE),
    "height": re.compile(
        r"\bhow tall\b|\bhow (?:heavy|much does .+ weigh)\b|\bheight\b", re.IGNORECASE
    ),
    "money": re.compile(
        r"\bhow much (?:money|did|does|do|is|was|are|were|will|would|per|a|an)\b|\bcost\b|\bprice\b",
        re.IGNORECASE,
    ),
    "phone": re.compile(
        r"\b(?:phone|cell|mobile|contact|room|ward|bed) number\b|\bpassword\b|\bplate\b"
        r"|\bwhat(?:'s| is) the code\b",
        re.IGNORECASE,
    ),
    "date": re.compile(
        r"^\s*when\b|\bwhat (?:day|date|year|month)\b|\bwhich (?:day|date)\b", re.IGNORECASE
    ),
    "count": re.compile(r"\bhow many\b|\bhow long\b", re.IGNORECASE),
}


def english_answer_kind(question: str) -> str | None:
    """The kind of value (a key of :data:`KINDS`) an English one-line ``question`` asks
    for ("When is my daughter's birthday?": a date; "How much did I pay...": money), or
    None. It is read against Chinese lines only: a Chinese chat writes the value in the
    line that says it (4月9号, 两千块), where an English chat keeps dates in its session
    header."""
    if is_mostly_cjk(question) or is_window(question):
        return None
    for kind, asks in ENGLISH_KINDS.items():
        if asks.search(question):
            return kind
    return None


def states(kind: str, text: str, words: Sequence[str] = ()) -> bool:
    """Whether ``text`` holds a value of ``kind`` (a key of :data:`KINDS`); a place also
    when one of its ``words`` (its search tokens) is one in jieba's dictionary."""
    if KINDS[kind][1].search(text):
        return True
    return kind == "place" and any(is_place(word) for word in words)


# a line that says a value changed: the later statement, which holds the current value
_CHANGED = re.compile(
    r"改成|改到|改去|改在|改为|改了|换成|换了|换到|搬到|搬去|搬家|搬走|跳槽|推迟|提前到|延期|"
    r"取消了|不再|改日子|改期|调到|调成|升职|离职|辞职|转学"
)


def changes(text: str) -> bool:
    """Whether a line says that something changed (改到, 搬到, 跳槽, 推迟…)."""
    return bool(_CHANGED.search(text))


# what asks for the value as it is now, after any change
_CURRENT = re.compile(r"现在|目前|如今|最新|新的|新家|新单位|新东家|新工作|最近|后来|改")


def asks_current(question: str) -> bool:
    """Whether a one-line Chinese question asks for a value as it is now ("我现在住在哪",
    "我未婚夫的新东家是哪家"): the line that says it changed (:func:`changes`) holds it."""
    return is_mostly_cjk(question) and not is_window(question) and bool(_CURRENT.search(question))
