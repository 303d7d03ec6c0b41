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
(:func:`~convmem.retrieve.unknowns.synonym_terms`;
:class:`~convmem.retrieve.searcher.HybridSearcher`).

The groups are hand-written, one concept each. A word may sit in several groups (爱人 is
a spouse, 老婆 a wife). Only words of two characters or more are listed, since a single
character also occurs inside unrelated words. :data:`CATEGORIES` add kinds (宠物, 用药)
with their members (柴犬, 头孢), one way: a question's kind word widens it to the members.
A kind is found in a question as written (two characters or more); a member is only
looked for as a word of a line (its search token), so a member may be one character (狗).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

from convmem.text.segment import tokenize, tokenizer_signature

__all__ = [
    "GROUPS",
    "equivalents",
    "reworded",
    "spelling",
    "synonym_groups",
    "synonyms",
    "synonyms_in",
    "synonyms_of",
]

GROUPS: tuple[str, ...] = (
    # kin
    "父母 爸妈 爹妈 双亲 父母亲 老爸老妈",
    "爸爸 父亲 老爸 我爸 老爷子 爹爹",
    "妈妈 母亲 老妈 我妈 老娘",
    "爱人 配偶 老伴 伴侣 另一半",
    "老婆 妻子 媳妇 太太 爱人 老伴 孩子他妈 孩子她妈 孩子妈妈 孩子妈",
    "老公 丈夫 先生 爱人 老伴 孩子他爸 孩子她爸 孩子爸爸 孩子爸",
    "女儿 闺女 姑娘 丫头",
    "儿子 小子 男娃",
    "孩子 小孩 孩儿 娃娃 宝宝 小朋友 毛孩子",
    "爷爷 祖父 外公 姥爷",
    "奶奶 祖母 外婆 姥姥",
    "哥哥 大哥 兄长",
    "姐姐 大姐 老姐",
    "弟弟 小弟 老弟",
    "妹妹 小妹 老妹",
    "男朋友 男友 对象 bf",
    "女朋友 女友 对象 gf",
    "未婚妻 未婚夫 对象",
    # in-laws: a father-in-law is not a mother-in-law (公婆 and 岳父母 are both)
    "公婆 婆婆",
    "公婆 公公",
    "岳父 丈人 老丈人 岳父母",
    "岳母 丈母娘 岳父母",
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

# What a question names by its kind and chat by the thing itself: "我养的宠物叫什么" of a
# chat that says 我家柴犬叫豆包, "我用药有什么禁忌" of 我头孢过敏. One way only: a kind's
# words widen a question to its members, never a member to its kind or to the other
# members (a question about a 柴犬 is not about every pet). The kinds are everyday ones
# a person's memory holds; the members are common words, one concept each.
CATEGORIES: tuple[tuple[str, str], ...] = (
    (
        "宠物 动物 小动物 毛孩子",
        "狗 猫 狗狗 猫咪 小狗 小猫 柴犬 柯基 金毛 泰迪 哈士奇 边牧 拉布拉多 比熊 博美 萨摩耶"
        " 法斗 雪纳瑞 布偶 英短 美短 橘猫 狸花猫 暹罗猫 仓鼠 兔子 鹦鹉 乌龟 金鱼 龙猫",
    ),
    (
        "用药 药物 吃药 服药 药品",
        "头孢 青霉素 阿莫西林 布洛芬 阿司匹林 胰岛素 二甲双胍 降压药 降糖药 他汀 感冒药"
        " 消炎药 抗生素 止痛药 安眠药 褪黑素 维生素 钙片 鱼油 中药 激素 喷剂 眼药水",
    ),
    (
        "乐器",
        "钢琴 电钢琴 吉他 尤克里里 小提琴 大提琴 古筝 二胡 琵琶 笛子 长笛 萨克斯 架子鼓 口琴 手风琴 电子琴 贝斯",
    ),
    ("科目 学科", "语文 数学 英语 物理 化学 生物 历史 地理 政治 美术 音乐 体育 科学"),
    (
        "运动 体育 球类",
        "篮球 足球 羽毛球 乒乓球 网球 排球 高尔夫 台球 游泳 跑步 夜跑 晨跑 瑜伽 普拉提 骑行"
        " 爬山 登山 徒步 滑雪 攀岩 拳击 马拉松 广场舞 太极",
    ),
    ("颜色", "白色 黑色 红色 蓝色 绿色 灰色 粉色 紫色 黄色 银色 金色 橙色 棕色 米色 深蓝"),
    (
        "汽车 车子 轿车 新车 车型",
        "比亚迪 特斯拉 宝马 奔驰 奥迪 大众 丰田 本田 日产 别克 理想 蔚来 小鹏 吉利 长安 五菱"
        " 问界 极氪 领克 哈弗 马自达 保时捷 SUV 电车",
    ),
    ("手机 电脑 平板", "苹果 iPhone 华为 小米 荣耀 OPPO vivo 三星 一加 联想 戴尔 MacBook iPad"),
    (
        "水果",
        "苹果 香蕉 芒果 草莓 西瓜 葡萄 橘子 橙子 荔枝 榴莲 樱桃 车厘子 桃子 菠萝 猕猴桃 柚子"
        " 哈密瓜 火龙果 蓝莓 山竹 龙眼",
    ),
    ("坚果", "花生 核桃 杏仁 腰果 开心果 榛子 松子 瓜子 夏威夷果 碧根果"),
    ("海鲜", "虾 螃蟹 大闸蟹 龙虾 扇贝 生蚝 蛤蜊 鱿鱼 三文鱼 贝类"),
    (
        "疾病 毛病 病情 慢性病",
        "糖尿病 高血压 心脏病 冠心病 胃病 胃炎 哮喘 鼻炎 颈椎病 腰椎 痛风 甲亢 甲减 抑郁症"
        " 失眠 偏头痛 贫血 脂肪肝 高血脂 血糖 血压 结石",
    ),
    (
        "交通工具 通勤",
        "地铁 公交 高铁 动车 火车 飞机 打车 出租车 骑车 自行车 单车 电瓶车 电动车 开车 步行 大巴",
    ),
    ("饮料 饮品", "咖啡 拿铁 美式 奶茶 绿茶 红茶 可乐 雪碧 果汁 啤酒 豆浆 牛奶 酸奶 气泡水"),
    ("学校 就读", "幼儿园 小学 初中 高中 中学 大学 学院 研究生"),
    (
        "职业 营生",
        "老师 教师 医生 护士 律师 会计 程序员 工程师 设计师 销售 司机 厨师 公务员 警察 记者"
        " 编辑 主播 客服 快递员 骑手 店长 经理 演员 摄影师 理发师 翻译 研究员 财务 人事 运营",
    ),
    ("节日 假期 长假", "春节 过年 元旦 清明 五一 劳动节 端午 中秋 国庆 寒假 暑假 圣诞 七夕"),
    ("语言 外语 方言", "英语 日语 韩语 德语 法语 西班牙语 俄语 粤语 普通话 四川话 上海话 闽南语"),
    ("证件", "身份证 护照 驾照 通行证 签证 居住证 社保卡 医保卡"),
    ("家电 电器", "冰箱 洗衣机 空调 电视 热水器 扫地机 洗碗机 微波炉 烤箱 空气炸锅 投影仪"),
    ("首饰", "项链 手链 手镯 戒指 耳环 耳钉 吊坠"),
)


@lru_cache(maxsize=1)
def _groups_index() -> dict[str, frozenset[str]]:
    index: dict[str, set[str]] = {}
    for group in GROUPS:
        members = group.split()
        for word in members:
            index.setdefault(word, set()).update(members)
    return {word: frozenset(others - {word}) for word, others in index.items()}


@lru_cache(maxsize=1)
def _index() -> dict[str, frozenset[str]]:
    index: dict[str, set[str]] = {word: set(others) for word, others in _groups_index().items()}
    for kinds, things in CATEGORIES:
        for kind in kinds.split():
            index.setdefault(kind, set()).update(things.split())
    return {word: frozenset(others - {word}) for word, others in index.items()}


def synonyms(word: str) -> frozenset[str]:
    """The other words of every group ``word`` is in (empty when it is in none)."""
    return _index().get(word, frozenset())


def equivalents(word: str) -> frozenset[str]:
    """The words that say the same as ``word`` (its :data:`GROUPS`), not the members of a
    kind it names (宠物 is no 柴犬): a question may say one of them in its place."""
    return _groups_index().get(word, frozenset())


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


def reworded(query: str, groups: Mapping[str, Sequence[str]], texts: Sequence[str]) -> str | None:
    """The question in the words of ``texts`` (a search's candidate lines): each word of
    ``groups`` (:func:`synonym_groups`) that no text says, replaced by the equivalent
    (:func:`equivalents`, never a kind's member: 颜色 is not 白色) the texts say most often.
    "我太太做哪块工作" of a chat that says 老婆 is "我老婆做哪块工作". None when no word is
    replaced."""
    said = query
    for word, others in groups.items():
        if word not in said or any(word in text for text in texts):
            continue
        same = equivalents(word)
        counts = {
            other: sum(text.count(other) for text in texts) for other in others if other in same
        }
        best = max(counts, key=lambda other: (counts[other], other), default=None)
        if best is not None and counts[best]:
            said = said.replace(word, best)
    return None if said == query else said
