"""The default, offline rule marker (Chinese and English).

Each turn is marked from its own text and role, so marks do not depend on how turns were
batched. Order of decisions for a user turn: explicit cues (rule/boundary, preference,
profile, task open/done, decision), then a value score for everything else: statements
about the speaker's own life, times and events, and content words count for it;
reactions, greetings, thanks and questions count against it. Assistant turns are
suggestions or inferences (S1) and are dropped unless they make a commitment; tool
output is kept as tool-grounded fact (S2); system turns are dropped. Explicit save
requests are found by :func:`save_intent` and turned into pins by ``derive``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from convmem.governance.chat_zh import HABIT_ZH, small_talk_zh, transient_state_zh
from convmem.governance.marker import MarkerBase, MarkTurn
from convmem.governance.policy import GovernancePolicy, policy_key
from convmem.governance.schema import TurnMark
from convmem.text import words
from convmem.text.segment import STOPWORDS

__all__ = ["CONFIRMS", "MarkTurn", "RuleMarker", "SaveIntent", "save_intent", "value_score"]


def _rx(*parts: str) -> re.Pattern[str]:
    return re.compile("|".join(parts), re.IGNORECASE)


# -- explicit save requests (seed 002 §4.3) ---------------------------------------------

SAVE_ZH = _rx(
    r"(?<!我)记住(这个|这些|这段|这条|这一点|这点|了吗|哦|啊|吧)?",
    r"帮我记(下来|住|一下|着)",
    r"记下来",
    r"(这|这个|这点|这条)(很|非常|特别)重要",
    r"请?(帮我)?(保存|存)(一下|下来|起来)?(这段|这个|这些|这条)?",
    r"别忘了(这个|这件事)?",
    r"收藏(一下|这个)",
    r"(?:^|(?<=[，,。！!；;：:\s]))(你|请|麻烦你?)?记一下",
)
# An imperative "remember ..." asks to save; asked ("Remember that time we went skiing?")
# it recalls the past: the sentence must not end in a question mark.
_NOT_ASKED = r"(?![^.!?\n]*\?)"
SAVE_EN = _rx(
    r"(^|[.!?]\s+)(please\s+)?(remember|save|note down|write down|bookmark)\s+(this|that|it)\b"
    + _NOT_ASKED,
    r"\b(can|could|would) you (please )?(remember|save|note|keep) (this|that|it)\b",
    r"(^|[.!?]\s+)(please\s+)?remember[,:]?\s+(that\b|to\b|(?=(my|our)\b))" + _NOT_ASKED,
    r"\bthis is (very |really )?important\b",
    r"\b(please )?don't forget (this|that)\b",
)
_REFERENCE_FILLER = _rx(
    r"这个|这些|这段|这条|这一点|这点|上面|刚才|前面|之前|的|分析|内容|结论|方案|回答|吧|哦|啊|呀|一下|请",
    r"\b(please|this|that|it|for me|analysis|answer|above|one|thanks|thank you|ok|okay)\b",
)


_POINTS_BACK = re.compile(r"这个|这些|这段|这条|这点|这一点|上面|刚才|前面|之前")


@dataclass(frozen=True)
class SaveIntent:
    """A save request in a turn; ``self_contained``: the turn itself holds what to save."""

    cue: str
    self_contained: bool


def save_intent(text: str) -> SaveIntent | None:
    """Find an explicit "remember this" request ("记住这个", "帮我记下来", "save this")."""
    match = SAVE_ZH.search(text) or SAVE_EN.search(text)
    if match is None:
        return None
    said = SAVE_EN.sub(" ", SAVE_ZH.sub(" ", text))  # without the cue (记住这个 says 这个)
    rest = _REFERENCE_FILLER.sub(" ", said)
    cjk = sum(1 for ch in rest if "\u4e00" <= ch <= "\u9fff")
    words = re.findall(r"[A-Za-z0-9]+", rest)
    # "记住这个方案，我以后按这个来" points back at what came before; only a longer
    # statement next to such a reference is the thing to save.
    needed = 8 if _POINTS_BACK.search(said) else 4
    return SaveIntent(cue=match.group(0).strip(), self_contained=cjk >= needed or len(words) >= 3)


# -- category cues ----------------------------------------------------------------------

RULE = _rx(
    r"(以后|今后|永远|千万|一定)?(不要|别再|不许|不准|禁止|请勿|务必)",
    r"(以后|今后|每次)都?(要|请|用|叫)",
    # "叫我小林" names the user; "五点半叫我起床" is a wake-up request (a task).
    r"叫我(?!起床|起来|一声|一下|吃饭|过去|过来)|称呼我",
    r"(以后|今后|每次|下次).{0,12}(别|不要|不用)",
    r"^(请)?别(再)?(用|叫|发|打|推荐|订|放|给我)",
    r"\b(don't|do not|never) (ever )?(call|use|send|share|tell|mention|suggest|recommend|book|schedule)\b",
    r"\b(always|from now on|in the future)\b.{0,40}\b(use|call|reply|answer|write|send)\b",
    r"\bcall me\b",
)
# What the user (or someone they care for) cannot eat: a rule when stated, not when asked
# ("我对什么过敏？" asks memory for the rule).
DIET = _rx(
    r"过敏|忌口|我不吃|我不喝|我.{0,4}(吃素|素食)",
    # someone the user cares for: "他不能吃海鲜", "我们家不吃猪肉"
    r"(我|我们|我们家|咱家|他|她|孩子|女儿|儿子|老公|老婆|爸|妈)(也|都)?(不能|不可以|不敢)(吃|喝)",
    r"(我们家|咱家|他|她|孩子|女儿|儿子|老公|老婆|爸|妈)(也|都|从来)?(不吃|不喝)",
    r"\b(allergic|vegan|vegetarian|i don't eat|i do not eat|i can't eat)\b",
)
PREFERENCE = _rx(
    r"我(很|最|比较|特别|非常|还是|更)?(喜欢|爱吃|爱喝|爱看|偏好|讨厌|不喜欢|受不了|习惯|倾向于)",
    r"我(最)?喜欢的",
    r"(我们|我们家|咱们|她|他|孩子|女儿|儿子|老婆|老公|爸|妈)(都|也)?(很|最|比较|特别|非常)?"
    r"(喜欢|爱吃|爱喝|爱看|不喜欢|讨厌)",
    HABIT_ZH.pattern,
    r"尽量(订|选|用|买|坐|住|安排)",
    # a verdict on a dish or a place: "那家的辣炒蛤蜊是一绝", "他家的锅包肉必点"
    r"是一绝|(?<!不)必点|(?<![不没])(最|超级?)好(吃|喝)",
    # a standing instruction: "快递放门口就行，不用打电话"
    r"[\u4e00-\u9fff]{2,12}就(行|好|可以)了?[，,。\s]*(不用|不要|不必|别)",
    r"\bi (really |do |don't |do not |much )?(like|love|prefer|hate|enjoy|dislike|can't stand)\b",
    r"\bmy (all-time )?favou?rite\b",
)
PROFILE = _rx(
    r"我(是|叫|姓)(?!不是|说|觉得|想)",
    r"我(住在|来自|在.{1,12}(工作|上班|上学|读书))",
    r"我今年\d+岁|我的(名字|生日|电话|邮箱|地址|工作|职业|老婆|老公|孩子|女儿|儿子)",
    r"\bmy name(?: is|'s)\b",
    # "Hi, I'm Tom": a capitalised name, not "I'm tired"
    r"(?-i:\b(?:I'm|I am|i'm|i am) (?!OK\b|Ok\b|Okay\b|Not\b|So\b|Sorry\b|Fine\b)[A-Z][a-z]+\b)",
    r"\bi(?:'m| am) (a|an) [a-z]+",
    r"\bi (work|worked) (as|at|for)\b",
    r"\bi (live|lived|grew up) in\b",
    r"\bi(?:'m| am) from\b",
    r"\bmy (birthday|wife|husband|partner|son|daughter|kids|children|job|email|phone)\b",
)
# Contact details are worth keeping whoever they belong to: a mobile or landline number,
# an email address.
CONTACT = _rx(
    r"(?<!\d)1[3-9]\d{9}(?!\d)",
    r"(?<!\d)0\d{2,3}-?\d{7,8}(?!\d)",
    r"\w@[\w-]+\.[a-z]{2,}",  # not [\w.]+@: that retries the rest of a word at each letter
)
TASK = _rx(
    r"提醒我|帮我(订|约|预约|安排|查|写|发|买|改|整理|准备)",
    r"(截止|期限|之前|前)(要|得|需要)?(完成|提交|交)",
    r"待办|我(要|得|需要|打算|计划|准备)(在|去|回|把|做|完成|提交|交|办|带|搬|参加)",
    r"叫我起床|叫醒我",
    r"\bremind me\b",
    r"\b(deadline|due (on|by)|to-?do)\b",
    r"\bi (need|have|want|plan) to\b",
    # "I'll go to the dentist on Friday", not an answer that names no act: "I will.",
    # "ok thanks, I'll try that", "I'll think about it"
    r"\bi(?:'ll| will|'m going to)\b(?!(\s+(definitely|surely|probably|certainly|totally|also))?"
    r"(\s+(try|do|consider|think about|check|look into|give|keep))?(\s+(it|that|this|them|so))?"
    r"(\s+(out|a try|a shot|a go|over|in mind))?[\s.!~]*$)",
    r"\b(can|could) you (please )?(book|schedule|order|send|write|draft|set up)\b",
)
DONE = _rx(
    r"(已经|已)(完成|做完|搞定|办好|提交|交了|发了|订好)",
    r"(做完|搞定|完成)了",
    r"(已经|已)[\u4e00-\u9fff]{1,3}(完|好)了",
    r"\b(i've|i have|we've|we have) (finished|completed|submitted|sent|done)\b",
    r"\b(it's|it is|that's) done\b",
    r"\bi (finished|completed|submitted)\b",
)
DECISION = _rx(
    r"决定(?!不)|就这么(办|定)|就(按|用|选)(这个|你说的|第)",
    r"就(订|买|要|选|用|定)(这|那|它|小|第)?",
    r"定了|确定(用|选|了)|选(择)?(了|第)",
    r"\b(let's|we'll|i'll|i will) go with\b",
    r"\b(i|we) (have )?decided\b",
    r"\bsounds good,? let's\b",
    r"\bdeal\b|\bagreed\b",
)
# A decision that answers the previous proposal ("就按这个定了", "let's go with that").
CONFIRMS = _rx(
    r"就(按|用|选|定|订|买|要)(这个|这家|这|那|它|你说的|你的|第.个|方案)",
    r"就这(么|样)(办|定|吧)",
    r"^\W*(好|行|可以|没问题|同意)[的吧啊]?\W*(就)?(这么|这样)?(定|办)了?",
    r"\b(let's|we'll|i'll) go with (that|it|this|yours|your|the (first|second|third|last))\b",
    r"\bsounds good,? let's\b",
    r"^\W*(deal|agreed)\b",
)
COMMITMENT_AI = _rx(
    r"我(会|将)(在|于)?.{0,12}(提醒你|通知你|帮你)",
    # "已经帮你记下了" acknowledges a save (the user's pin covers it); not a commitment.
    r"(已|已经)(为你|帮你|为您|帮您)(预约|预订|安排|设置|创建)",
    r"(好的|没问题|会|将|届时).{0,10}(提醒|通知)(您|你)",
    r"\bi(?:'ll| will) remind you\b",
    r"\bi(?:'ve| have) (booked|scheduled|set up|created)\b",
)

# -- value score for turns without a cue ---------------------------------------------

FIRST_PERSON = _rx(r"\b(i|i'm|i've|i'd|i'll|my|me|mine|myself|we|we're|we've|we'll|our|us|ours)\b")
FIRST_PERSON_ZH = re.compile(r"我|咱")
REACTION = _rx(
    r"\bi(?:'m| am|'d| would)?\s+(so |really |totally |just |also |definitely |too )*"
    r"(glad|happy|sure|proud|sorry|thrilled|impressed|curious|bet|hope|guess|agree|understand|"
    r"appreciate|can see|can imagine|can tell|can't wait|love that|love it|love this|love your|"
    r"love how|like that|like your|feel you|get it|know what you mean|admire|wish you|"
    r"will keep|'ll keep|hear you|remember)\b",
    r"我(也|真|很|太|好|非常)?(觉得|理解|明白|同意|相信|希望|替你|为你|懂)",
)
TEMPORAL = _rx(
    r"\b(yesterday|today|tomorrow|tonight|ago|recently|lately)\b",
    r"\b(last|next|this) (week|month|year|weekend|night|summer|winter|spring|fall|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    r"\bjust (got|started|finished|signed|joined|bought|moved|adopted|went|came back)\b",
    r"\bbeen (doing|working|trying|busy|thinking|tweaking|learning|planning)\b",
    r"\b(19|20)\d\d\b",
    r"昨天|今天|明天|前天|后天|上周|下周|上个月|下个月|去年|今年|明年|最近|刚刚|刚才|周[一二三四五六日末]|\d+[年月号点]",
)
OPENER = _rx(
    r"^\s*(wow|thanks|thank you|cool|awesome|great|nice|congrats|congratulations|aww|haha|"
    r"lol|yeah|sure|definitely|good|oh|that's|sounds|glad|so glad|no problem|hey|hi|hello|"
    r"omg|totally|absolutely|yes|right|ok|okay)\b",
    r"^\s*(哇|哈哈|谢谢|好的|嗯|哦|太好了|太棒了|不错|真棒|加油|你好|早上好|晚安|好吧|是的|对)",
)
# A question without a question mark: "今天的快递怎么还没到".
RHETORICAL_ZH = re.compile(r"(怎么|为什么|为啥|咋)(还|又|都|就)?(没|不)")
YOU = _rx(r"\byou\b|\byour\b|你")
# Sentence ends, line breaks, and in Chinese chat the space that people type between
# clauses instead of punctuation ("在改英文简历 education那栏写 RWTH ... 这样ok吗": only the
# last clause asks): a space next to a Chinese character ends a clause.
SENTENCES = re.compile(
    r"(?<=[.!?。！？])\s*|\n+|(?<=[\u4e00-\u9fff])[ \t]+|[ \t]+(?=[\u4e00-\u9fff])"
)
PHOTO = re.compile(r"\[shares a photo:[^\]]*\]")
_SMALL_TALK = (
    "wow cool awesome great nice amazing thanks thank really so very too just also sure",
    "definitely totally absolutely okay ok hey hi hello haha lol aww omg sounds sound seems",
    "like love glad happy proud sorry hope bet see know think feel guess wish keep fun time",
    "incredible fantastic wonderful beautiful exciting excited interesting inspiring",
    "impressive stunning lovely adorable blast congrats congratulations check pic picture",
    "photo good yeah yes thing things way lot lots much more always never ever even still",
    "哇 哈哈 谢谢 好的 嗯 哦 不错 真棒 加油 厉害 可以 好吧 是的 确实 感觉 觉得 真的 好 棒",
    "天气 晴天 舒服 开心 有意思 好玩 适合 出门 走走 真好 太好了",
)
SMALL_TALK_WORDS = frozenset(" ".join(_SMALL_TALK).split())


def _sentences(text: str) -> list[str]:
    return [part.strip() for part in SENTENCES.split(PHOTO.sub(" ", text)) if part.strip()]


def value_score(text: str) -> float:
    """How much a turn without a category cue says worth remembering (0 = nothing).

    Counts, over sentences that are not questions: statements about the speaker (a
    first-person sentence that is not just a reaction), times and events, and content
    words; an opening reaction and talk about the listener count against it. Weights were
    fitted on LoCoMo's observation labels (bench/marking.py).
    """
    disclosure = temporal = content = 0
    for sentence in _sentences(text):
        if sentence.endswith(("?", "？", "吗", "呢")) or RHETORICAL_ZH.search(sentence):
            continue
        rest = REACTION.sub(" ", sentence)
        about_self = bool(FIRST_PERSON.search(rest) or FIRST_PERSON_ZH.search(rest))
        disclosure += about_self
        content_words = sum(
            1
            for token in words(TEMPORAL.sub(" ", rest))
            if token not in STOPWORDS and token not in SMALL_TALK_WORDS and len(token) > 1
        )
        content += content_words
        # a time counts when it dates something ("护照明年过期"), not in "今天天气不错"
        if TEMPORAL.search(sentence) and (about_self or content_words):
            temporal += 1
    score = 0.45 * disclosure + 0.85 * temporal + 0.17 * min(content, 20)
    if OPENER.search(text):
        score -= 0.2
    score -= 0.13 * len(YOU.findall(text))
    return max(score, 0.0)


# Where a cue counts: anywhere in the turn (a request is often asked: "能提醒我吗？"), only
# in a turn that is no question, or only in a clause that is no question: "我对什么过敏？"
# and "What's my phone number?" ask memory for a fact, they do not state one.
ANYWHERE, IN_STATEMENT, IN_STATED_CLAUSE = "anywhere", "statement", "stated clause"

# User cues in the order they are tried: (pattern, where it counts, the mark's category,
# subtype, evidence level, importance and reason).
USER_CUES: tuple[tuple[re.Pattern[str], str, tuple[str, str | None, str, float, str]], ...] = (
    (RULE, ANYWHERE, ("rule", "constraint", "S0_user_claim", 0.8, "user rule or boundary")),
    (DIET, IN_STATED_CLAUSE, ("rule", "constraint", "S0_user_claim", 0.8, "user rule or boundary")),
    (DECISION, IN_STATEMENT, ("fact", "decision", "S3_user_confirmed", 0.7, "user decision")),
    (PREFERENCE, IN_STATED_CLAUSE, ("preference", None, "S0_user_claim", 0.7, "user preference")),
    (TASK, ANYWHERE, ("task", "commitment", "S0_user_claim", 0.6, "open task or request")),
    (DONE, ANYWHERE, ("task", "commitment", "S0_user_claim", 0.5, "task marked done")),
    (
        PROFILE,
        IN_STATED_CLAUSE,
        ("fact", "profile", "S0_user_claim", 0.7, "stable information about the user"),
    ),
    (CONTACT, ANYWHERE, ("fact", None, "S0_user_claim", 0.7, "contact details")),
)

# A clause and what ends it: punctuation, a line break, or in chat a space beside a
# Chinese character.
_CLAUSE = re.compile(
    r"(.+?)((?:[，,；;。.！!？?\n]|(?<=[\u4e00-\u9fff])[ \t]|[ \t](?=[\u4e00-\u9fff]))+|$)"
)


def stated_clauses(text: str) -> str:
    """The clauses of ``text`` that are not questions, one a line: "我对花生过敏，能推荐个零食吗？"
    keeps "我对花生过敏", "我对什么过敏？" keeps nothing."""
    kept = []
    for match in _CLAUSE.finditer(text):
        clause, end = match.group(1).strip(), match.group(2)
        if clause and "?" not in end and "？" not in end and not clause.endswith(("吗", "呢")):
            kept.append(clause)
    return "\n".join(kept)


def _cue_applies(
    pattern: re.Pattern[str], where: str, text: str, stated: str, question: bool
) -> bool:
    if where == IN_STATED_CLAUSE:
        return bool(pattern.search(stated))
    return bool(pattern.search(text)) and not (where == IN_STATEMENT and question)


class RuleMarker(MarkerBase):
    """Deterministic, offline marker; the default. Needs no context: each turn is marked
    on its own words."""

    name = "rules-v1"

    def mark_turns(
        self, turns: list[MarkTurn], context: list[MarkTurn], policy: GovernancePolicy
    ) -> list[TurnMark]:
        return [self.mark_one(turn, policy) for turn in turns]

    def mark_one(self, turn: MarkTurn, policy: GovernancePolicy) -> TurnMark:
        text = turn.text.strip()
        if not text:
            return _drop(turn, "empty turn")
        if turn.role == "system":
            return _drop(turn, "system instruction, not memory about the user")
        question = text.rstrip().endswith(("?", "？", "吗", "呢"))
        if turn.role == "tool":
            return _keep(
                turn,
                policy,
                "fact",
                "tool_grounded_fact",
                "S2_tool_grounded",
                0.6,
                "tool output: a tool-grounded fact (S2)",
            )
        if turn.role == "assistant":
            if COMMITMENT_AI.search(text) and not question:
                return _keep(
                    turn,
                    policy,
                    "task",
                    "commitment",
                    "S1_ai_inference",
                    0.6,
                    "assistant commitment to act for the user",
                    done=bool(DONE.search(text)),
                )
            return _drop(turn, "assistant suggestion or inference (S1), not kept by default")
        return self._mark_user(turn, text, question, policy)

    def _mark_user(
        self, turn: MarkTurn, text: str, question: bool, policy: GovernancePolicy
    ) -> TurnMark:
        intent = save_intent(text)
        if intent is not None and not intent.self_contained:
            return _drop(turn, f"save request ('{intent.cue}'): pins the turns before it")
        done = bool(DONE.search(text))
        stated = stated_clauses(text)
        for pattern, where, (category, subtype, level, importance, reason) in USER_CUES:
            if _cue_applies(pattern, where, text, stated, question):
                task_done = category == "task" and done
                if task_done:
                    reason = "task marked done"
                return _keep(
                    turn, policy, category, subtype, level, importance, reason, done=task_done
                )
        small_talk = small_talk_zh(text)
        if small_talk is not None:
            return _drop(turn, f"small talk: {small_talk}")
        score = value_score(text)
        if score >= policy.keep_threshold:
            transient = transient_state_zh(text)
            return _keep(
                turn,
                policy,
                "fact",
                None,
                "S0_user_claim",
                round(min(0.3 + 0.05 * score, 0.6), 3),
                ("passing state" if transient else "user statement with information")
                + f" (score {score:.2f})",
                transient=transient,
            )
        if question:
            return _drop(turn, f"question without information (score {score:.2f})")
        return _drop(turn, f"small talk or reaction (score {score:.2f})")


def _drop(turn: MarkTurn, reason: str) -> TurnMark:
    return TurnMark(turn_id=turn.turn_id, keep=False, reason=reason)


def _keep(
    turn: MarkTurn,
    policy: GovernancePolicy,
    category: str,
    subtype: str | None,
    evidence: str,
    importance: float,
    reason: str,
    *,
    done: bool = False,
    transient: bool = False,
) -> TurnMark:
    rule = policy.rule(policy_key(category, evidence, task_done=done, transient=transient))
    return TurnMark.model_validate(
        {
            "turn_id": turn.turn_id,
            "keep": True,
            "category": category,
            "subtype": subtype,
            "evidence_level": evidence,
            "importance": importance,
            "ttl_seconds": rule.ttl_seconds,
            "forget_policy": rule.forget_policy,
            "reason": reason,
        }
    )
