"""Chinese chat signals for the rule marker: small talk, transient states, habits.

Daily-life Chinese chat is mostly greetings, thanks, acknowledgements ("好的，我试试"),
laughter and passing remarks ("周末好无聊啊"). Segmented into words these still look
like content, so the value score alone keeps them. These patterns find them first, and
find the statements about today's state ("今天有点累") that deserve a short life rather
than the half year of a user fact. Measured on bench/data/marking_zh_chat.jsonl
(bench/marking.py; tuned on its ``dev`` half only).
"""

from __future__ import annotations

import re

__all__ = ["HABIT_ZH", "small_talk_zh", "transient_state_zh"]

# A clause that is only a greeting, thanks, acknowledgement, laughter or an interjection.
_ACK_CLAUSE = re.compile(
    r"^(哈+|嘿+|呵+|嗯+|哦+|噢|喔|啊|唉|哇+|诶|欸|天哪|天啊|我的天|好+|好的|好滴|好嘞|好吧|好呀|好啊|"
    r"行|行吧|可以|没问题|没事|没关系|对|对的|对啊|对对对|是|是的|是啊|是呀|确实|没错|有道理|"
    r"知道了|明白了?|了解|收到|懂了|谢谢(你|啦|哈|了)?.{0,6}|谢啦|多谢|感谢|辛苦(你)?了|麻烦你了|"
    r"你好|您好|嗨|哈喽|早|早安|早上好|中午好|下午好|晚上好|晚安|在吗|在不在|拜拜|再见|回头见|"
    r"加油|冲+|太好了|太棒了|真棒|厉害|不错|一般般?|还行|还好|随便|算了|也是|也对|嗯嗯|"
    r"借你吉言|好主意|好建议)"
    r"[啊呀哦哈吧啦呢嘛呗滴嘞哟~～😄😂👍\s]*$"
)
_CLAUSES = re.compile(r"[，,。.！!？?~～、；;：:\s]+")
_LAUGHTER = re.compile(r"(哈|嘿|呵){2,}|[😄😂🤣👍]")
# Chat about the conversation itself: asking for a joke, saying hello, being bored.
_CHAT_ONLY = re.compile(
    r"打(个)?招呼|讲个笑话|再来一个|陪我聊|随便聊|聊聊天|好无聊|无聊死|你(真|可真|太)会|你真(靠谱|好|方便)|"
    r"你(是|会).{0,6}[吗呢]|真羡慕|快点来|冲冲冲"
)
# A passing judgement ("那家餐厅真不错", "这种天气最适合吃火锅了"): without "我" it says
# nothing about the user.
_VERDICT = re.compile(
    r"(真|太|好|挺|很|超|最|特别)(的)?(不错|好吃|好喝|好看|好玩|好听|舒服|可爱|适合|厉害|棒|香|美|贵|便宜|漂亮|有意思)"
)
# What makes a short turn worth keeping anyway: a number, a count or a date.
_NUMBER = re.compile(
    r"\d|[两二三四五六七八九十百千万]+(个|岁|年|月|号|日|天|点|口|只|次|块|元|斤|层|室|楼)"
)
# ... or a person or a life event: "我老婆怀孕了", "我儿子住院了".
_ANCHOR = re.compile(
    r"老婆|老公|妻子|丈夫|女儿|儿子|孩子|爸|妈|爷爷|奶奶|外公|外婆|哥|姐|弟|妹|女朋友|男朋友|"
    r"对象|同事|领导|老板|室友|邻居|猫|狗|怀孕|结婚|离婚|生病|住院|搬家|换工作|辞职|入职|毕业|养了|买了"
)
_PARTICLE_END = re.compile(r"[吧啊呀嘛呗啦哦哈滴嘞咯]\W*$")
_CJK = re.compile(r"[\u4e00-\u9fff]")

# Near-day times and passing states: "今天有点累", "这两天感冒了", "明天六点就得出门".
_NEAR_DAY = re.compile(
    r"今天|今晚|今早|今儿|昨晚|昨天|昨夜|这两天|这几天|刚才|刚刚|现在|明天|明早|早上|晚上"
)
_STATE = re.compile(
    r"累|困|饿|渴|忙|感冒|发烧|咳嗽|头疼|头痛|嗓子|肚子疼|胃疼|不舒服|难受|心情|烦|郁闷|沮丧|生气|"
    r"紧张|焦虑|失眠|没睡好|睡不着|加班|早起|出门|批评|心慌"
)
# Habits and standing choices: "我坐高铁一般都选靠窗的座位", "我每天早上都要喝一杯美式".
HABIT_ZH = re.compile(
    r"我.{0,8}(一般|通常|平时|平常|总是|向来|一直|每次|每天|每周|每个月)(早上|晚上)?(都|只|会)?"
    r"(要|选|坐|喝|吃|用|买|点|订|住|去|看|穿|听)"
    r"|我(不太|不怎么|挺|蛮|超|真的|其实|也|都|更)(喜欢|爱吃|爱喝|爱看|讨厌|不喜欢)"
)


def small_talk_zh(text: str) -> str | None:
    """Why a Chinese user turn is small talk (greeting, thanks, acknowledgement,
    laughter, chat about the chat), or None when it may carry information.

    A turn is small talk when every clause is an acknowledgement or laughter, when it
    is chat about the conversation itself or a passing judgement without "我" ("那家餐厅
    真不错"; every clause a judgement), or when a chatty turn (an acknowledgement,
    laughter or a closing particle such as 吧/啊) leaves after those clauses a short
    remark (fewer than 8 Chinese characters) naming no number, date, person or life
    event.
    """
    if not _CJK.search(text):
        return None
    clauses = [clause for clause in _CLAUSES.split(_LAUGHTER.sub(" ", text)) if clause]
    rest = [clause for clause in clauses if not _ACK_CLAUSE.match(clause)]
    if not rest:
        return "greeting, thanks or acknowledgement"
    remainder = "".join(rest)
    if _CHAT_ONLY.search(remainder) and not _NUMBER.search(remainder):
        return "chat about the conversation itself"
    anchored = _NUMBER.search(remainder) or _ANCHOR.search(remainder)
    # Only chatty turns: "护照明年过期" is short and plain, and a fact.
    chatty = len(rest) < len(clauses) or _LAUGHTER.search(text) or _PARTICLE_END.search(text)
    # every clause a judgement: "日本的机票太贵了，春节改去泰国普吉岛" says a plan after it
    judged = all(_VERDICT.search(clause) for clause in rest)
    if judged and "我" not in remainder and not anchored:
        return "a passing judgement, nothing about the user"
    if chatty and len(_CJK.findall(remainder)) < 8 and not anchored:
        return "short remark without information"
    return None


def transient_state_zh(text: str) -> bool:
    """A statement about a passing state today or these days ("今天有点累")."""
    return bool(_NEAR_DAY.search(text) and _STATE.search(text))
