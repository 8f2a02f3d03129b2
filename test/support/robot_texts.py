"""Deterministic robot texts: an agreement set, and a LoCoMo-style retrieval set.

``robot_texts(n)`` mixes what a robot's memory holds (detections, scene
captions, body readings, things people told it, questions a planner asks), from
two words to a long caption beyond 128 tokens, for checking that two embedders
give the same vectors.

``retrieval_set()`` imitates LoCoMo's long-memory QA: days of events in a home
told to or seen by a robot ("Tuesday 09:14: Carla left the blue umbrella by the
front door in the hallway"), each one asked about later in other words ("Where
is Carla's blue brolly?", "What did Carla leave by the front door in the hallway
on Tuesday?"), among many near-misses that share the person, the object, the
colour or the place. Recall@10 = share of questions whose event is
among the 10 nearest texts. Same seed, same set, on any machine.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

PEOPLE = ["Alice", "Bob", "Carla", "Deniz", "Emil", "Fatima", "Goro", "Hana", "Ivan", "Jonas", "Kemal", "Lena"]
OBJECTS = ["mug", "umbrella", "laptop", "backpack", "toolbox", "book", "phone", "scarf", "water bottle", "remote",
           "keys", "glasses", "charger", "drill", "notebook", "headphones", "wallet", "lunch box", "vase", "lamp"]
COLOURS = ["red", "blue", "green", "black", "white", "yellow", "grey", "brown", "orange", "purple"]
ROOMS = ["kitchen", "living room", "office", "hallway", "bedroom", "garage", "bathroom", "workshop", "lab",
         "dining room"]
SPOTS = ["on the table", "by the front door", "on the shelf", "under the desk", "next to the sink",
         "behind the sofa", "on the windowsill", "in the top drawer", "on the floor", "beside the printer"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
# (past tense in the event, how a question asks about it)
VERBS = [("left", "leave"), ("put", "put"), ("dropped", "drop"), ("hid", "hide"), ("forgot", "forget"),
         ("placed", "place"), ("stored", "store"), ("set down", "set down")]
EVENT_FORMS = [
    "{day} {time}: {person} {verb} the {colour} {obj} {spot} in the {room}.",
    "{person} told the robot on {day} at {time} that they {verb} their {colour} {obj} {spot} in the {room}.",
    "The robot saw {person} in the {room} on {day} around {time}; they {verb} a {colour} {obj} {spot}.",
    "{person}: \"I {verb} my {colour} {obj} {spot} in the {room}\" ({day}, {time}).",
]
SYNONYMS = {"mug": "cup", "umbrella": "brolly", "laptop": "computer", "backpack": "rucksack", "toolbox": "tool case",
            "book": "novel", "phone": "mobile", "scarf": "shawl", "water bottle": "flask", "remote": "TV controller",
            "keys": "key ring", "glasses": "spectacles", "charger": "power adapter", "drill": "power drill",
            "notebook": "notepad", "headphones": "earphones", "wallet": "purse", "lunch box": "food container",
            "vase": "flower pot", "lamp": "light"}
QUESTION_FORMS = [
    "Where did {person} {ask} the {colour} {obj}?",
    "Which room did {person} {ask} their {colour} {synonym} in?",
    "Where is {person}'s {colour} {synonym}?",
    "On which day did {person} {ask} the {colour} {obj} {spot}?",
    "What did {person} {ask} {spot} in the {room} on {day}?",
    "Who {verb} a {colour} {synonym} in the {room}?",
]


@dataclass(frozen=True)
class RetrievalSet:
    corpus: list[str]
    questions: list[str]
    answers: list[int]
    """Index in ``corpus`` of the event each question asks about."""


def retrieval_set(events: int = 2000, questions: int = 300, fillers: int = 1000, seed: int = 15) -> RetrievalSet:
    """``events`` distinct events (+ ``fillers`` robot perception lines); ``questions`` of them asked about."""
    rng = random.Random(seed)
    combos = list(itertools.product(PEOPLE, COLOURS, OBJECTS))
    rng.shuffle(combos)
    if events > len(combos):
        raise ValueError(f"at most {len(combos)} events")
    corpus: list[str] = []
    facts: list[dict[str, str]] = []
    for person, colour, obj in combos[:events]:
        verb, ask = rng.choice(VERBS)
        fact = {"person": person, "colour": colour, "obj": obj, "synonym": SYNONYMS[obj], "verb": verb, "ask": ask,
                "spot": rng.choice(SPOTS), "room": rng.choice(ROOMS), "day": rng.choice(DAYS),
                "time": f"{rng.randrange(6, 23):02d}:{rng.randrange(60):02d}"}
        facts.append(fact)
        corpus.append(rng.choice(EVENT_FORMS).format(**fact))
    corpus.extend(robot_texts(fillers, seed=seed + 1))
    order = list(range(len(corpus)))
    rng.shuffle(order)
    position = {old: new for new, old in enumerate(order)}
    shuffled = [corpus[i] for i in order]
    asked = rng.sample(range(events), questions)
    return RetrievalSet(corpus=shuffled,
                        questions=[rng.choice(QUESTION_FORMS).format(**facts[i]) for i in asked],
                        answers=[position[i] for i in asked])


def robot_texts(n: int = 300, seed: int = 7) -> list[str]:
    """``n`` varied texts a robot's memory holds, short and long."""
    rng = random.Random(seed)
    makers = [
        lambda: f"{rng.choice(COLOURS)} {rng.choice(OBJECTS)}",
        lambda: ", ".join(rng.sample(OBJECTS, rng.randrange(2, 6))),
        lambda: f"a {rng.choice(COLOURS)} {rng.choice(OBJECTS)} {rng.choice(SPOTS)} in the {rng.choice(ROOMS)}",
        lambda: f"battery at {rng.randrange(5, 100)} %, {rng.choice(['charging', 'discharging', 'idle'])}",
        lambda: f"CPU temperature {rng.uniform(35, 90):.1f} C",
        lambda: f"{rng.choice(PEOPLE)} is {rng.choice(['walking toward', 'standing near', 'sitting at'])} the "
                f"{rng.choice(OBJECTS)} in the {rng.choice(ROOMS)}",
        lambda: f"where did I last see the {rng.choice(COLOURS)} {rng.choice(OBJECTS)}?",
        lambda: f"door to the {rng.choice(ROOMS)} is {rng.choice(['open', 'closed', 'half open', 'blocked'])}",
        lambda: "The " + rng.choice(ROOMS) + " contains " + ", ".join(
            f"a {rng.choice(COLOURS)} {o} {rng.choice(SPOTS)}" for o in rng.sample(OBJECTS, 12)) + ".",
        lambda: " ".join(rng.choice(OBJECTS + ROOMS + PEOPLE) for _ in range(rng.randrange(60, 140))),
        lambda: f"obstacle detected {rng.uniform(0.2, 3):.2f} m ahead; replanning around the {rng.choice(OBJECTS)}",
        lambda: rng.choice(["ok", "low battery!", "Wi-Fi lost", "e-stop pressed", "bump sensor", "ÜBER café naïve"]),
    ]
    return [rng.choice(makers)() for _ in range(n)]
