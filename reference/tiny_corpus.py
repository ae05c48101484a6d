"""Builds the tiny model's corpus: plain text from Debian packages (bible-kjv, fortunes-min) and
generated chat data rendered with assets/chat_template.jinja (facts with known answers, JSON
outputs, XML tool calls, <think> on and off), plus a held-out set phrased differently.
Usage: tiny_corpus.py --out DIR   (writes train.jsonl, text.jsonl, heldout.jsonl; fixed seed)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess

import jinja2
import jinja2.ext
import jinja2.sandbox

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"), ("Poland", "Warsaw"), ("Austria", "Vienna"), ("Greece", "Athens"),
    ("Ireland", "Dublin"), ("the Netherlands", "Amsterdam"), ("Belgium", "Brussels"),
    ("Switzerland", "Bern"), ("Hungary", "Budapest"), ("Czechia", "Prague"), ("Romania", "Bucharest"),
    ("Russia", "Moscow"), ("Ukraine", "Kyiv"), ("Turkey", "Ankara"), ("Egypt", "Cairo"),
    ("Kenya", "Nairobi"), ("Nigeria", "Abuja"), ("Morocco", "Rabat"), ("Ghana", "Accra"),
    ("Ethiopia", "Addis Ababa"), ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"),
    ("South Korea", "Seoul"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("Indonesia", "Jakarta"),
    ("the Philippines", "Manila"), ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("Saudi Arabia", "Riyadh"),
    ("Pakistan", "Islamabad"), ("Bangladesh", "Dhaka"), ("Australia", "Canberra"),
    ("New Zealand", "Wellington"), ("Canada", "Ottawa"), ("the United States", "Washington"),
    ("Mexico", "Mexico City"), ("Brazil", "Brasília"), ("Argentina", "Buenos Aires"), ("Chile", "Santiago"),
    ("Peru", "Lima"), ("Colombia", "Bogotá"), ("Venezuela", "Caracas"), ("Cuba", "Havana"),
    ("Iceland", "Reykjavik"), ("the United Kingdom", "London"), ("Nepal", "Kathmandu"),
    ("Mongolia", "Ulaanbaatar"), ("Malaysia", "Kuala Lumpur"), ("Estonia", "Tallinn"), ("Latvia", "Riga"),
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
            "tenth", "eleventh", "twelfth"]
STREETS = ["Oak Street", "Pine Road", "Lake Avenue", "Hill Lane", "River Road", "Park Street",
           "Mill Lane", "Elm Street", "Station Road", "Bridge Street", "Maple Avenue", "Church Lane"]
CITIES = ["Lisbon", "Oslo", "Paris", "Berlin", "Madrid", "Rome", "Vienna", "Dublin", "Prague",
          "Warsaw", "Athens", "Cairo", "Tokyo", "Seoul", "Lima", "Ottawa", "Nairobi", "Helsinki"]
SKIES = ["sunny", "cloudy", "rainy", "windy", "foggy", "snowy"]

# Train and held-out phrasings: held-out sentences never appear in training (test_tiny.py checks the
# wrapped training phrasings too). Training has many sentence shapes per family, built from common
# synonyms (follows / precedes, sum / product, take away, ...), so that a 5 M-parameter model learns
# to read the relation and the entity rather than memorise a handful of sentences.
Q = {
    "capital": (["What is the capital of {c}?", "What's the capital city of {c}?", "Tell me the capital of {c}.",
                 "Name the capital of {c}.", "{C}: what is its capital?", "I need the capital of {c}, please.",
                 "Capital of {c}?", "Do you know the capital of {c}?", "What is the capital of {c}? One word.",
                 "Name the capital city of {c}. One word.", "Which city is the capital of {c}?",
                 "The capital of {c} is which city?", "What city serves as {c}'s capital?",
                 "Capital of {c}? One word, please.", "In one word: the capital of {c}?"],
                ["Which city serves as the capital of {c}?", "What city is the capital of {c}? Answer in one word."]),
    "plus": (["What is {a} plus {b}?", "What is {a} + {b}?", "Add {a} and {b}.", "Compute {a} + {b}.",
              "How much is {a} plus {b}?", "Find the sum: {a} + {b}.", "Give me the sum of {a} and {b}.",
              "Work out {a} plus {b}.", "{a} plus {b} equals what?", "Add {b} to {a}.",
              "Tell me the sum of {a} and {b}.", "Please compute {a} plus {b}."],
             ["Calculate {a} plus {b}.", "What is the sum of {a} and {b}?"]),
    "minus": (["What is {a} minus {b}?", "What is {a} - {b}?", "Subtract {b} from {a}.", "Compute {a} - {b}.",
               "How much is {a} minus {b}?", "Take {b} away from {a}. What is left?", "Work out {a} minus {b}.",
               "If you take {b} away from {a}, how many are left?", "{a} minus {b} equals what?",
               "What remains when {b} is taken from {a}?", "Please compute {a} minus {b}."],
              ["Calculate {a} minus {b}.", "What do you get when you take {b} away from {a}?"]),
    "times": (["What is {a} times {b}?", "What is {a} * {b}?", "Multiply {a} by {b}.", "Compute {a} * {b}.",
               "How much is {a} times {b}?", "Find the product: {a} * {b}.", "Give me the product of {a} and {b}.",
               "Multiply {a} and {b}.", "Work out {a} times {b}.", "{a} times {b} equals what?",
               "Tell me the product of {a} and {b}.", "Please compute {a} times {b}."],
              ["Calculate {a} times {b}.", "What is the product of {a} and {b}?"]),
    "next_day": (["What day comes after {d}?", "What is the day after {d}?", "Which day is after {d}?",
                  "If today is {d}, what day is tomorrow?", "Name the day that follows {d}.",
                  "{D} is followed by which day?", "It is {d} today. Which day is tomorrow?",
                  "Tell me the day after {d}.", "After {d}, which day comes next?",
                  "What day is tomorrow if today is {d}?", "The day after {d} is which day?",
                  "Today it is {d}. And tomorrow?", "We are on {d}. What day is it tomorrow?",
                  "Which weekday comes after {d}?", "What weekday is after {d}?",
                  "Say which day comes after {d}.", "Tomorrow is what day, if today is {d}?"],
                 ["Which day follows {d}?", "Today is {d}. What will tomorrow be?"]),
    "prev_day": (["What day comes before {d}?", "What is the day before {d}?", "Which day is before {d}?",
                  "If today is {d}, what day was yesterday?", "Name the day that precedes {d}.",
                  "{D} is preceded by which day?", "It is {d} today. Which day was yesterday?",
                  "Tell me the day before {d}.", "Before {d}, which day comes?",
                  "What day was yesterday if today is {d}?", "The day before {d} is which day?",
                  "Today it is {d}. And yesterday?", "We are on {d}. What day was it yesterday?",
                  "Which weekday comes before {d}?", "What weekday comes just before {d}?",
                  "Say which day comes before {d}.", "Yesterday was what day, if today is {d}?"],
                 ["Which day precedes {d}?", "Today is {d}. What was yesterday?"]),
    "next_month": (["What month comes after {m}?", "What is the month after {m}?", "Which month is after {m}?",
                    "Name the month that follows {m}.", "{M} is followed by which month?",
                    "Tell me the month after {m}.", "After {m}, which month comes next?",
                    "If this month is {m}, what is next month?", "It is {m} now. What month is next?",
                    "Next month after {m}?", "The month after {m} is which?", "What month is next after {m}?",
                    "Which month comes next after {m}?"],
                   ["Which month follows {m}?"]),
    "month_days": (["How many days are in {m}?", "How many days does {m} have?", "Number of days in {m}?",
                    "How many days long is {m}?", "What is the length of {m} in days?",
                    "Tell me how many days {m} has.", "{M}: how many days?", "How many days does {m} last?"],
                   ["How long is {m} in days?", "{M} has how many days?"]),
    "month_num": (["What is the {o} month of the year?", "Which month is the {o} month?", "Name the {o} month.",
                   "Tell me the {o} month of the year.", "In the calendar, which month is {o}?",
                   "What month is {o} in the year?", "Which month is month number {n}?"],
                  ["Which month comes {o} in the year?"]),
    "json": (["Turn these orders into a JSON array: {orders}", "Convert these dispatch orders to JSON: {orders}",
              "Give me a JSON array for these orders: {orders}", "Write these drone orders as JSON: {orders}",
              "Format these orders as a JSON array: {orders}", "Output these dispatch orders as JSON: {orders}",
              "As JSON, please: {orders}", "I have some orders. Write them as a JSON array: {orders}"],
             ["Please output the following dispatch orders as a JSON array: {orders}",
              "Here are some orders, as JSON please: {orders}"]),
    "weather": (["What's the weather in {x}?", "What is the weather like in {x}?", "Check the weather in {x}.",
                 "How is the weather in {x}?", "Is it cold in {x} right now?", "What's it like outside in {x}?",
                 "Current weather for {x}, please.", "Weather report for {x}?", "How warm is it in {x} today?",
                 "Is it raining in {x}?"],
                ["Tell me the current weather for {x}.", "Is it nice outside in {x} right now?"]),
    "warmer": (["Is it warmer in {x} or in {y}?", "Which is warmer right now, {x} or {y}?",
                "Which city is warmer today, {x} or {y}?", "Is {x} or {y} warmer right now?",
                "Compare the weather in {x} and {y}: which is warmer?"],
               ["Where is it warmer today: {x} or {y}?"]),
}
# The training capital shapes that ask for a one-word answer.
ONE_WORD_CAPITAL = [t for t in Q["capital"][0] if "one word" in t.lower()]
# Optional openings and endings of training questions (never of held-out ones).
PREFIXES = ["", "", "", "Quick question: ", "Please tell me: ", "Hey! ", "Question: ", "I have a question. "]
SUFFIXES = ["", "", "", " Thanks!", " Please be brief.", " Answer briefly."]


def train_phrasings(kind: str):
    """Every training sentence shape of a family: its templates with each opening and ending."""
    return {p + t + s for t in Q[kind][0] for p in PREFIXES for s in SUFFIXES}


def phrase(rng, kind: str, held_out: bool, shapes=None) -> str:
    """A held-out sentence, or a training shape (from `shapes`, default all of the family's) with an
    optional opening and ending."""
    if held_out:
        return rng.choice(Q[kind][1])
    return rng.choice(PREFIXES) + rng.choice(shapes or Q[kind][0]) + rng.choice(SUFFIXES)


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}
# Share of each fact family kept in the held-out set (it is evaluated in every mode).
HELD_OUT_FRACTION = {"plus": 0.12, "minus": 0.08, "times": 0.2, "capital": 0.67}
# Training copies per family: (use every k-th pass, examples per fact in that pass).
TRAIN_COPIES = {"plus": (3, 1), "minus": (4, 1), "times": (3, 1), "capital": (2, 1), "next_day": (1, 3),
                "prev_day": (1, 3), "next_month": (1, 2), "month_days": (1, 2), "month_num": (1, 2)}
GREETINGS = [("Hello!", "Hello! How can I help you today?"), ("Hi there.", "Hi! What can I do for you?"),
             ("Good morning!", "Good morning! How can I help?"), ("Thanks!", "You are welcome!"),
             ("Who are you?", "I am a tiny Clover model, trained to answer short questions."),
             ("What can you do?", "I can answer simple questions about capitals, numbers, days and months, "
              "write JSON and call tools.")]


def make_env():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda v, **kw: json.dumps(v, ensure_ascii=False, **kw)

    def raise_exception(msg):
        raise RuntimeError(msg)
    env.globals["raise_exception"] = raise_exception
    return env


class Renderer:
    """Renders conversations with the project's chat template as transformers would."""

    def __init__(self, template_path: str):
        with open(template_path, encoding="utf-8") as f:
            self.source = f.read()
        self.t = make_env().from_string(self.source)

    def split(self, messages, thinking: bool, tools=None):
        """Returns (prompt, answer): the generation prompt for the last assistant turn, and what
        the model must write after it (ending with <|im_end|>)."""
        full = self.t.render(messages=messages, tools=tools, add_generation_prompt=False,
                             enable_thinking=thinking)
        prompt = self.t.render(messages=messages[:-1], tools=tools, add_generation_prompt=True,
                               enable_thinking=thinking)
        if not full.startswith(prompt):
            raise AssertionError(f"template: prompt is not a prefix of the conversation:\n{prompt!r}\n{full!r}")
        answer = full[len(prompt):]
        if answer.endswith("\n"):
            answer = answer[:-1]  # the turn's trailing newline is never generated (EOG comes first)
        return prompt, answer


def orders_text(rng, n):
    orders, parts = [], []
    for _ in range(n):
        o = {"drone": rng.randint(1, 9), "to": rng.choice(STREETS), "boxes": rng.randint(1, 5)}
        orders.append(o)
        parts.append(f"drone {o['drone']} to {o['to']} with {o['boxes']} box{'es' if o['boxes'] > 1 else ''}")
    return "; ".join(parts) + ".", orders


def fact_items(rng):
    """Yields (kind, fields, answer, thought, expected) for every fact question family."""
    for c, city in CAPITALS:
        yield "capital", dict(c=c, C=c[0].upper() + c[1:]), f"The capital of {c} is {city}.", \
            f"The user asks for the capital of {c}. The capital of {c} is {city}.", city
    for a in range(0, 13):
        for b in range(0, 13):
            yield "plus", dict(a=a, b=b), f"{a} + {b} = {a + b}.", \
                f"The user wants {a} plus {b}. {a} + {b} = {a + b}.", str(a + b)
    for a in range(0, 21):
        for b in range(0, a + 1):
            yield "minus", dict(a=a, b=b), f"{a} - {b} = {a - b}.", \
                f"The user wants {a} minus {b}. {a} - {b} = {a - b}.", str(a - b)
    for a in range(1, 11):
        for b in range(1, 11):
            yield "times", dict(a=a, b=b), f"{a} * {b} = {a * b}.", \
                f"The user wants {a} times {b}. {a} * {b} = {a * b}.", str(a * b)
    for i, d in enumerate(DAYS):
        n, p = DAYS[(i + 1) % 7], DAYS[i - 1]
        yield "next_day", dict(d=d, D=d), f"The day after {d} is {n}.", f"The day after {d} is {n}.", n
        yield "prev_day", dict(d=d, D=d), f"The day before {d} is {p}.", f"The day before {d} is {p}.", p
    for i, m in enumerate(MONTHS):
        n = MONTHS[(i + 1) % 12]
        yield "next_month", dict(m=m, M=m), f"The month after {m} is {n}.", f"The month after {m} is {n}.", n
        yield "month_days", dict(m=m, M=m), f"{m} has {MONTH_DAYS[i]} days.", \
            f"{m} has {MONTH_DAYS[i]} days.", str(MONTH_DAYS[i])
        yield "month_num", dict(o=ORDINALS[i], n=i + 1), f"The {ORDINALS[i]} month of the year is {m}.", \
            f"Month number {i + 1} is {m}.", m


def one_word(q: str, answer: str, expected: str) -> str:
    return expected + "." if "one word" in q.lower() else answer


def chat_examples(rng, r: Renderer, held_out: bool, repeats: int):
    """Training (held_out False) or held-out records: {"prompt", "answer", "kind", "expected"}."""
    out = []

    def add(kind, messages, thinking, expected, tools=None):
        p, a = r.split(messages, thinking, tools)
        out.append({"kind": kind, "prompt": p, "answer": a, "expected": expected, "thinking": thinking,
                    "question": messages[0]["content"], "tools": bool(tools)})

    def conv(q, answer, thought, thinking):
        msg = {"role": "assistant", "content": answer}
        if thinking:
            msg["reasoning_content"] = thought
        return [{"role": "user", "content": q}, msg]

    for rep in range(repeats):
        for kind, f, answer, thought, expected in fact_items(rng):
            if held_out and rng.random() > HELD_OUT_FRACTION.get(kind, 1.0):
                continue
            # Fewer passes over the big arithmetic tables and the capitals than over the small day and
            # month families, which get several phrasings per pass.
            every, copies = (1, 1) if held_out else TRAIN_COPIES.get(kind, (1, 1))
            if rep % every != 0:
                continue
            shapes = [None] * copies
            if kind == "capital" and not held_out:
                # One more question per country and pass that asks for one word: answering with the
                # bare city is the capitals' weakest shape (docs/reference.md, fourth and fifth corpus).
                shapes.append(ONE_WORD_CAPITAL)
            for s in shapes:
                q = phrase(rng, kind, held_out, s).format(**f)
                thinking = rng.random() < 0.5
                add(kind, conv(q, one_word(q, answer, expected), thought, thinking), thinking, expected)
        for _ in range(10 if held_out else 30):
            n = rng.randint(1, 4)
            text, orders = orders_text(rng, n)
            q = phrase(rng, "json", held_out).format(orders=text)
            js = json.dumps(orders, ensure_ascii=False)
            thinking = rng.random() < 0.5
            thought = f"There {'is' if n == 1 else 'are'} {n} order{'s' if n > 1 else ''}. I write one object per order."
            add("json", conv(q, js, thought, thinking), thinking, js)
        # Tool turns carry a ~230-token system prompt: few of them keep training affordable.
        for _ in range(10):
            x = rng.choice(CITIES)
            q = phrase(rng, "weather", held_out).format(x=x)
            thinking = rng.random() < 0.5
            call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": x}}}
            msgs = [{"role": "user", "content": q},
                    {"role": "assistant", "content": "", "tool_calls": [call]}]
            if thinking:
                msgs[-1]["reasoning_content"] = f"The user asks about the weather in {x}. I call get_weather."
            add("weather_call", msgs, thinking, json.dumps({"get_weather": [x]}), tools=[WEATHER_TOOL])
            if not held_out and rng.random() < 0.25:  # the answer after the tool result (training only)
                t, sky = rng.randint(-5, 35), rng.choice(SKIES)
                res = json.dumps({"city": x, "temp_c": t, "sky": sky})
                msgs2 = msgs + [{"role": "tool", "content": res},
                                {"role": "assistant", "content": f"It is {t} °C and {sky} in {x}."}]
                if thinking:
                    msgs2[-1]["reasoning_content"] = f"The tool says {t} °C and {sky} in {x}."
                add("weather_answer", msgs2, thinking, str(t), tools=[WEATHER_TOOL])
        for _ in range(5):
            x, y = rng.sample(CITIES, 2)
            q = phrase(rng, "warmer", held_out).format(x=x, y=y)
            thinking = rng.random() < 0.5
            calls = [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": c}}}
                     for c in (x, y)]
            msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": "", "tool_calls": calls}]
            if thinking:
                msgs[-1]["reasoning_content"] = f"I need the weather in {x} and in {y}. I call get_weather twice."
            add("warmer_call", msgs, thinking, json.dumps({"get_weather": [x, y]}), tools=[WEATHER_TOOL])
        if not held_out:
            for q, a in GREETINGS:
                thinking = rng.random() < 0.5
                add("greeting", conv(q, a, "The user greets me or asks about me.", thinking), thinking, a)
    return out


def plain_text(max_chars: int, verses_per_piece: int = 4):
    """KJV verses (public domain; `bible -f` prints one "Ge1:1 text" line per verse), grouped a few
    verses per piece, and fortunes-min sayings, as plain-text training pieces."""
    kjv = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], capture_output=True, text=True, check=True).stdout
    verses = [line.split(" ", 1)[1].strip() for line in kjv.splitlines() if " " in line]
    pieces = [" ".join(verses[i:i + verses_per_piece]) for i in range(0, len(verses), verses_per_piece)]
    fdir = "/usr/share/games/fortunes"
    sayings = []
    for name in ("fortunes", "literature", "riddles"):
        path = os.path.join(fdir, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                sayings += [p.strip() for p in f.read().split("\n%\n") if p.strip()]
    out, n = list(sayings), sum(map(len, sayings))
    for p in pieces:
        if n >= max_chars:
            break
        out.append(p)
        n += len(p)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--template", default=os.path.join(ROOT, "assets", "chat_template.jinja"))
    ap.add_argument("--repeats", type=int, default=12, help="passes over the fact families (fresh phrasings)")
    ap.add_argument("--text-chars", type=int, default=1_500_000)
    ap.add_argument("--seed", type=int, default=20261129)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    r = Renderer(a.template)
    train = chat_examples(rng, r, held_out=False, repeats=a.repeats)
    held = chat_examples(random.Random(a.seed + 1), r, held_out=True, repeats=1)
    rng.shuffle(train)
    with open(os.path.join(a.out, "train.jsonl"), "w", encoding="utf-8") as f:
        for x in train:
            f.write(json.dumps(x, ensure_ascii=False) + "\n")
    with open(os.path.join(a.out, "heldout.jsonl"), "w", encoding="utf-8") as f:
        for x in held:
            f.write(json.dumps(x, ensure_ascii=False) + "\n")
    text = plain_text(a.text_chars)
    with open(os.path.join(a.out, "text.jsonl"), "w", encoding="utf-8") as f:
        for t in text:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    print(f"corpus: {len(train)} training chats, {len(held)} held-out questions, {len(text)} text pieces "
          f"({sum(map(len, text))} chars) -> {a.out}")


if __name__ == "__main__":
    main()
