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

from convmem.text.synonyms import synonyms

__all__ = ["RELATIONS", "relations", "spellings"]

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
# someone else's relation: the word right before it is a person other than the user
_OF_ANOTHER = re.compile(r"(?:孩子|儿子|女儿|闺女|老公|老婆|爱人|媳妇|[他她它]|[^我]的)的?$")


def relations(question: str) -> list[str]:
    """The relations of :data:`RELATIONS` a question names of the user, longest first and
    each once (外孙女, not 外孙 again)."""
    found: list[str] = []
    for word in sorted(RELATIONS, key=len, reverse=True):
        at = question.find(word)
        if at < 0 or any(word in other for other in found):
            continue
        if _OF_ANOTHER.search(question[:at]):
            continue
        found.append(word)
    return found


def spellings(relation: str) -> list[str]:
    """The words a chat may say the relation by: itself and its synonyms."""
    return [relation, *sorted(synonyms(relation))]
