"""An agent chat loop with long-term memory: before each reply, recall; after it, remember.

    python examples/agent_chat.py                  # a scripted conversation, then exits
    python examples/agent_chat.py --interactive    # type messages; an empty line ends

The "model" here is a stand-in that answers from what memory returns, so the example runs
offline with the hashing embedder; put your LLM call in ``reply``.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from convmem import HashingEmbedder, Memory

SCRIPT = [
    "我下个月去东京出差，护照是 2025-02-18 过期。",
    "我不吃香菜，飞机上喜欢靠窗的座位。",
    "帮我想想出发前要准备什么？",
    "我的护照哪天到期？",
]


def reply(message: str, recalled: list[str]) -> str:
    """Stand-in for the LLM: a real agent puts ``recalled`` into its prompt."""
    if not recalled:
        return "好的，我记下了。"
    return "根据我记得的：" + " / ".join(line.replace("\n", " ")[:120] for line in recalled)


def chat(memory: Memory, conversation_id: str, messages: list[str]) -> list[str]:
    """Run the loop over ``messages``; returns the agent's replies."""
    replies = []
    # after the highest id ever stored: counting live turns would reuse the id of a deleted
    # turn (ids stay retired) and miss turns past the count's limit
    last_turn = memory.status(conversation_id)["last_turn"]
    turn_id = 0 if last_turn is None else last_turn + 1
    for message in messages:
        hits = memory.search(message, top_k=3, filters={"conversation_id": conversation_id})
        answer = reply(message, [hit.text for hit in hits if hit.score > 0])
        now = datetime.now(UTC).isoformat()
        memory.add_turns(
            conversation_id,
            [
                {"turn_id": turn_id, "role": "user", "text": message, "timestamp": now},
                {"turn_id": turn_id + 1, "role": "assistant", "text": answer, "timestamp": now},
            ],
        )
        memory.flush()  # index now so the next question can recall this one
        turn_id += 2
        replies.append(answer)
        print(f"用户: {message}\n助手: {answer}\n")
    return replies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", help="store file (default: a temporary folder)")
    parser.add_argument("--interactive", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        store = args.store or str(Path(scratch) / "agent.db")
        with Memory.open(store, embedder=HashingEmbedder(), workers=0) as memory:
            if args.interactive:
                while message := input("> ").strip():
                    chat(memory, "chat_demo", [message])
            else:
                chat(memory, "chat_demo", SCRIPT)
            print(f"{memory.stats()['turns']} turns remembered in {memory.stats()['store']}")


if __name__ == "__main__":
    main()
