#!/usr/bin/python3
"""Writes the deterministic tokenizer agreement corpus: a JSON array of documents (>= 1 MB).

Usage: /usr/bin/python3 tests/oracles/tok_corpus.py OUT.json [--english OUT.txt]
Sources (all from Debian packages the build installs): English prose from bible-kjv (`bible`) and
fortunes-min, code from /usr/include and Python's standard library, and generated text for CJK,
emoji, combining marks (Devanagari, Arabic harakat, Vietnamese, also decomposed), numbers,
whitespace runs, contractions, special tokens inside text and random Unicode. Generated text uses
a fixed seed. Random code points are limited to characters assigned with the same general category
in Unicode 3.2 and in Python's Unicode version, so Unicode-version differences between the
oracle's regex engine and ours cannot show up as disagreements.
--english writes the English prose alone (the speed benchmark's input).
"""
import glob
import json
import os
import random
import subprocess
import sys
import sysconfig
import unicodedata

SEED = 20261129


def bible(ref):
    return subprocess.run(["bible", "-f", ref], check=True, capture_output=True,
                          text=True).stdout


def english_prose():
    """The King James Bible (4.3 MB) and the fortunes-min files."""
    text = bible("gen1:1-rev22:21")
    for name in ("fortunes", "literature", "riddles"):
        path = os.path.join("/usr/share/games/fortunes", name)
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                text += f.read().replace("\n%\n", "\n\n")
    return text


def chunks(text, rng, lo, hi):
    out, pos = [], 0
    while pos < len(text):
        n = rng.randint(lo, hi)
        out.append(text[pos:pos + n])
        pos += n
    return out


def code_files(limit_bytes):
    stdlib = sysconfig.get_paths()["stdlib"]
    candidates = sorted(glob.glob("/usr/include/*.h")) + sorted(
        glob.glob("/usr/include/c++/*/bits/stl_*.h")) + sorted(glob.glob(stdlib + "/json/*.py")) + [
            stdlib + "/" + n for n in ("textwrap.py", "argparse.py", "difflib.py", "heapq.py")]
    out, total = [], 0
    for path in candidates:
        if total >= limit_bytes or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()[:12000]
        out.append(text)
        total += len(text.encode())
    return out


def stable_chars():
    """Characters assigned in Unicode 3.2 with the same category now (see module docstring)."""
    old = unicodedata.ucd_3_2_0
    chars = []
    for cp in range(0x20, 0x30000):
        if 0xD800 <= cp <= 0xDFFF or 0xE000 <= cp <= 0xF8FF:
            continue
        c = chr(cp)
        cat = unicodedata.category(c)
        if cat in ("Cn", "Co", "Cs") or old.category(c) != cat:
            continue
        if unicodedata.normalize("NFC", c) != old.normalize("NFC", c):
            continue
        chars.append(c)
    return chars


def cjk(rng):
    han = [chr(c) for c in range(0x4E00, 0x9FA6)]
    common = han[:3000]
    kana = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)]
    hangul = [chr(c) for c in range(0xAC00, 0xD7A4)]
    punct = list("，。！？、；：「」『』（）《》…—") + ["　"]
    out = []
    for _ in range(60):
        s = []
        for _ in range(rng.randint(200, 900)):
            r = rng.random()
            if r < 0.55:
                s.append(rng.choice(common if rng.random() < 0.8 else han))
            elif r < 0.72:
                s.append(rng.choice(kana))
            elif r < 0.85:
                s.append(rng.choice(hangul))
                if rng.random() < 0.2:
                    s.append(" ")
            elif r < 0.95:
                s.append(rng.choice(punct))
            else:
                s.append(rng.choice([" ", "\n", "ABC", "2026年", "GPU", "3.5"]))
        text = "".join(s)
        if rng.random() < 0.3:  # Hangul as conjoining jamo: NFC must compose it back.
            text = unicodedata.normalize("NFD", text)
        out.append(text)
    return out


EMOJI = ["😊", "😂", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "1️⃣", "#️⃣", "❤️", "✨", "🧑🏿‍💻",
         "🐍", "🚀", "☕", "♀️", "🫠", "🤷‍♂️", "😶‍🌫️", "©️", "™"]


def emoji(rng):
    words = ["ok", "nice", "ship it", "gg", "lol", "yes!!", "no", "Paris", "#tag", "@user"]
    out = []
    for _ in range(40):
        s = []
        for _ in range(rng.randint(100, 400)):
            r = rng.random()
            if r < 0.5:
                s.append(rng.choice(EMOJI) * rng.randint(1, 3))
            elif r < 0.8:
                s.append(rng.choice(words))
            else:
                s.append(rng.choice([" ", "  ", "\n", "", ",", "."]))
        out.append("".join(s))
    return out


DEVANAGARI = ["हिन्दी", "विकिपीडिया", "संस्कृतम्", "क़िला", "ज़िन्दगी", "प्रश्न", "श्रीमान्", "नमस्ते", "भारत",
              "कृष्ण", "ड़", "ऋषि", "ॐ", "१२३४", "।"]
ARABIC = ["ضَمَّة", "فَتْحَة", "كَسْرَة", "سُكُون", "مُحَمَّد", "الْعَرَبِيَّة", "بِسْمِ", "اللَّهِ", "آمِين", "إِنَّ",
          "شَدَّة", "٠١٢٣", "؟", "،"]
VIETNAMESE = ["Tiếng", "Việt", "người", "được", "những", "trường", "Hà", "Nội", "phở", "đường",
              "chữ", "quốc", "ngữ", "nghiêng", "Ướt", "ỷ"]
OTHER_MARKED = ["שָׁלוֹם", "ภาษาไทย", "น้ำ", "Ελληνικά", "ἀρχὴ", "Zoë", "naïve", "façade", "Ångström",
                "crème brûlée", "ñandú", "Øresund", "ǅemal", "ﬁne", "Å", "Ω", "ﬀ"]


def combining(rng):
    marks = [chr(c) for c in range(0x300, 0x370)]
    out = []
    for _ in range(80):
        s = []
        for _ in range(rng.randint(80, 300)):
            r = rng.random()
            if r < 0.22:
                s.append(rng.choice(DEVANAGARI))
            elif r < 0.44:
                s.append(rng.choice(ARABIC))
            elif r < 0.66:
                s.append(rng.choice(VIETNAMESE))
            elif r < 0.78:
                s.append(rng.choice(OTHER_MARKED))
            elif r < 0.88:  # marks after letters, digits, punctuation, spaces or at the start
                base = rng.choice(["a", "Z", "9", ".", " ", "", "ß", "(", "\n", "ا"])
                s.append(base + "".join(rng.choice(marks) for _ in range(rng.randint(1, 4))))
            else:
                s.append(rng.choice([" ", "  ", "\n", ", ", ". ", "\t", "-"]))
            if rng.random() < 0.7:
                s.append(" ")
        text = "".join(s)
        form = rng.choice(["NFC", "NFD", "none", "none"])  # decomposed text must normalize
        out.append(unicodedata.normalize(form, text) if form != "none" else text)
    return out


def numbers(rng):
    out = []
    for _ in range(40):
        s = []
        for _ in range(rng.randint(100, 300)):
            r = rng.random()
            if r < 0.3:
                s.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
            elif r < 0.45:
                s.append("%.*f" % (rng.randint(1, 6), rng.uniform(-1e4, 1e4)))
            elif r < 0.55:
                s.append("{:,}".format(rng.randint(1000, 10 ** 10)))
            elif r < 0.65:
                s.append(rng.choice(["٣٤٥", "１２３", "²³", "½", "Ⅻ", "⑤", "१९४७", "3rd", "v1.2.3",
                                     "0x1F", "1e-9", "2026-01-15", "12:30:45", "$4.99", "50%",
                                     "+1 (555) 010-9999", "π≈3.14159", "10⁻³", "①②③"]))
            else:
                s.append(rng.choice([" ", "  ", ", ", "\n", " and ", " = ", " x "]))
        out.append("".join(s))
    return out


def whitespace(rng):
    spaces = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", " \n",
              "\u00a0", "\u3000", "\u2028", "\u2029", "\u2003", "\u200b", "\x0b", "\x0c", "\x85",
              "\u202f", "\u205f", "\u1680", "    \n", "\t \n \t"]
    words = ["a", "b", "word", "x1", "def", "if", "(", ")", "{", "}", ":", "//", "#", "é", "中"]
    out = []
    for _ in range(60):
        s = []
        for _ in range(rng.randint(100, 400)):
            s.append(rng.choice(spaces) * rng.randint(1, 3) if rng.random() < 0.5 else
                     rng.choice(words))
        out.append("".join(s))
    return out


CONTRACTIONS = ["I'M", "they'RE", "DON'T", "we'll", "it's", "I've", "she'd", "'S", "'s", "'LL",
                "'Ve", "'D", "'ſ", "'K", "o'clock", "rock 'n' roll", "don’t", "''", "'''", "' s",
                "'re'", "'sss", "y'all'd've", "'T", "'t'"]


def contractions(rng):
    out = []
    for _ in range(20):
        s = [rng.choice(CONTRACTIONS) + rng.choice([" ", "", ".", "\n", "'"])
             for _ in range(rng.randint(100, 300))]
        out.append("".join(s))
    return out


SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<tool_response>", "</tool_response>", "<|fim_prefix|>", "<|fim_middle|>",
            "<|fim_suffix|>", "<|vision_start|>", "<|image_pad|>", "<|box_start|>"]
NEAR_MISSES = ["<|im_end", "<|im_end|", "<im_end|>", "<|IM_END|>", "<<|im_end|>>", "< think>",
               "<think", "</think", "<|", "|>", "<>", "</", "<tool_call >", "<|im_start|><|im_end|>"]


def specials(rng):
    out = []
    for i in range(60):
        s = []
        for _ in range(rng.randint(20, 60)):
            r = rng.random()
            if r < 0.35:
                s.append(rng.choice(SPECIALS))
            elif r < 0.5:
                s.append(rng.choice(NEAR_MISSES))
            elif r < 0.75:
                s.append(rng.choice(["user\n", "assistant\n", "system\n", "Hello!", " ", "\n",
                                     "Okay, 1+1 is 2.\n", "<function=w>\n<parameter=city>\nParis\n"
                                     "</parameter>\n</function>\n", "{\"a\": 1}", "x<y", "a<b>c"]))
            else:
                s.append(rng.choice(VIETNAMESE + ARABIC[:3] + EMOJI[:5]))
        out.append("".join(s))
    return out


def random_unicode(rng, chars):
    out = []
    for _ in range(80):
        n = rng.randint(50, 400)
        out.append("".join(rng.choice(chars) if rng.random() < 0.7 else rng.choice(" \n\ta.,'")
                           for _ in range(n)))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rng = random.Random(SEED)
    prose = english_prose()
    sections = {"english": [], "code": code_files(300_000), "cjk": cjk(rng), "emoji": emoji(rng),
                "combining": combining(rng), "numbers": numbers(rng),
                "whitespace": whitespace(rng), "contractions": contractions(rng),
                "specials": specials(rng), "random_unicode": random_unicode(rng, stable_chars())}
    # 400 KB of English prose spread over the whole Bible, then all fortunes.
    bible_text = bible("gen1:1-rev22:21")
    for start in range(0, len(bible_text), len(bible_text) // 40):
        sections["english"] += chunks(bible_text[start:start + 10000], rng, 500, 4000)
    sections["english"] += chunks(prose[len(bible_text):], rng, 500, 4000)
    docs = [d for name in sections for d in sections[name] if d]
    print("tok_corpus: " + ", ".join("%s %d KB" % (name, sum(len(d.encode()) for d in v) // 1000)
                                     for name, v in sections.items()), file=sys.stderr)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(docs, f, ensure_ascii=False)
    size = sum(len(d.encode()) for d in docs)
    print("tok_corpus: %d documents, %d bytes" % (len(docs), size), file=sys.stderr)
    if len(sys.argv) >= 4 and sys.argv[2] == "--english":
        with open(sys.argv[3], "w", encoding="utf-8") as f:
            f.write(prose)


if __name__ == "__main__":
    main()
