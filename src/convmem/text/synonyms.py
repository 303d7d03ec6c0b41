"""Everyday Chinese synonyms: the words chat uses for the same person, time or thing.

A question asks "我父母是做哪一行的" of a chat that said 我爸妈在老家开了个小面馆. It asks
"我早晨得服啥药" where the chat said 天天早上吃一片. Questions and chat name kin, days of the
week, times of day and everyday things in different words: written and spoken, northern and
southern. :func:`synonyms` gives the other words of a word's groups. A one-line Chinese
question's lexical search also looks for the synonyms of the words it holds
(:func:`synonyms_in`): they rank the chunk candidates a second time, beside the question's
own words, and join the turns' own BM25; a line saying a synonym covers the question's
word (:func:`synonym_groups`, :func:`~convmem.retrieve.evidence.synonym_alternatives`), and
the word is not absent from a chat that says it so
(:func:`~convmem.retrieve.calibration.synonym_terms`;
:class:`~convmem.retrieve.searcher.HybridSearcher`).

The groups are hand-written, one concept each. A word may sit in several groups (爱人 is
a spouse, 老婆 a wife). Only words of two characters or more are listed, since a single
character also occurs inside unrelated words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

from convmem.text.segment import tokenize, tokenizer_signature

__all__ = ["GROUPS", "spelling", "synonym_groups", "synonyms", "synonyms_in", "synonyms_of"]

GROUPS: tuple[str, ...] = (
    # kin
    "父母 爸妈 爹妈 双亲 父母亲 老爸老妈",
    "爸爸 父亲 老爸 我爸 老爷子 爹爹",
    "妈妈 母亲 老妈 我妈 老娘",
    "爱人 配偶 老伴 伴侣 另一半",
    "老婆 妻子 媳妇 太太 爱人 老伴 孩子他妈 孩子她妈",
    "老公 丈夫 先生 爱人 老伴 孩子他爸 孩子她爸",
    "女儿 闺女 姑娘 丫头",
    "儿子 小子 男娃",
    "孩子 小孩 孩儿 娃娃 宝宝 小朋友 毛孩子",
    "爷爷 祖父 外公 姥爷",
    "奶奶 祖母 外婆 姥姥",
    "哥哥 大哥 兄长",
    "姐姐 大姐 老姐",
    "弟弟 小弟 老弟",
    "妹妹 小妹 老妹",
    "男朋友 男友 对象",
    "女朋友 女友 对象",
    "未婚妻 未婚夫 对象",
    "公婆 婆婆 公公",
    "岳父 岳母 丈人 丈母娘",
    "老板 领导 上司 老大 经理 主管",
    "同事 同僚 工友",
    "医生 大夫 医师",
    "老师 教练 导师",
    "宠物 毛孩子 猫咪 狗狗",
    # times
    "早上 早晨 清晨 上午 早起",
    "晚上 夜里 晚间 夜晚 傍晚",
    "中午 晌午 午饭",
    "今天 今儿 今日",
    "明天 明儿 明日",
    "昨天 昨儿 昨日",
    "星期一 礼拜一 周一",
    "星期二 礼拜二 周二",
    "星期三 礼拜三 周三",
    "星期四 礼拜四 周四",
    "星期五 礼拜五 周五",
    "星期六 礼拜六 周六",
    "星期天 星期日 礼拜天 礼拜日 周日 周天",
    "周末 礼拜天 星期天",
    "每周 每星期 每礼拜",
    "生日 诞辰 寿辰",
    # everyday things and doings
    "吃药 服药 用药",
    "看病 就医 就诊 看医生",
    "住院 入院",
    "毛病 病情 不舒服 疾病",
    "工作 上班 职业 干活 工作单位",
    "公司 单位 厂里",
    "住址 住处 住所 家住",
    "房子 住房 房屋 公寓 婚房 新房",
    "装修 翻新 装潢",
    "预算 花费 开销 费用",
    "价钱 价格 多少钱 花了",
    "电话 手机号 号码 联系方式",
    "忌口 不能吃 不吃 不敢吃 过敏",
    "结婚 成家 婚礼 婚宴 办酒",
    "旅游 旅行 出游",
    "钓鱼 垂钓 甩竿",
    "锻炼 健身 运动",
    "训练 培训 上课 课程",
    "考试 考核 测验",
    "上学 读书 念书",
    "汽车 轿车 车子",
    "航班 飞机 机票",
    "座位 位子 座儿",
    "饮料 汽水 饮品",
    # a person's attributes as questions ask them and chat says them (stop 42)
    "爱好 兴趣 消遣 乐趣 业余",
    "年纪 岁数 年龄",
    "身高 个子 个头",
    "出生 生日",
    "职业 营生 行当 一行",
    "生意 买卖",
    "牌子 品牌",
    "邻居 对门 街坊",
)


@lru_cache(maxsize=1)
def _index() -> dict[str, frozenset[str]]:
    index: dict[str, set[str]] = {}
    for group in GROUPS:
        members = group.split()
        for word in members:
            index.setdefault(word, set()).update(members)
    return {word: frozenset(others - {word}) for word, others in index.items()}


def synonyms(word: str) -> frozenset[str]:
    """The other words of every group ``word`` is in (empty when it is in none)."""
    return _index().get(word, frozenset())


def synonyms_in(text: str) -> list[str]:
    """The synonyms of every listed word ``text`` holds (found as a substring, as jieba may
    cut a question otherwise: 我早晨得服啥药 gives 得服), minus the words it holds already."""
    return synonyms_of(synonym_groups(text))


def synonyms_of(groups: Mapping[str, Sequence[str]]) -> list[str]:
    """The synonyms of :func:`synonym_groups`, each once, in order."""
    return list(dict.fromkeys(other for others in groups.values() for other in others))


def synonym_groups(text: str) -> dict[str, list[str]]:
    """Each listed word ``text`` holds (as :func:`synonyms_in` finds them) with its
    synonyms that ``text`` does not hold."""
    return {
        word: [other for other in sorted(others) if other not in text]
        for word, others in _index().items()
        if word in text
    }


def spelling(word: str) -> tuple[str, ...]:
    """A word's search tokens, each once, in order (the listed words are few: cached, and
    tokenized again under a new user dictionary)."""
    return _spelling(word, tokenizer_signature())


@lru_cache(maxsize=4096)
def _spelling(word: str, signature: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(tokenize(word)))
