"""Prompt templates: messages, the parse rule of each template (examples and fuzzing), the format reward."""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from envs import GAMES, make
from envs.base import parse_move
from sp_lightning.prompts import (
    TEMPLATES,
    ParseResult,
    PlainTemplate,
    PromptTemplate,
    ReasoningTemplate,
    format_reward,
    last_boxed,
    make_template,
)
from sp_lightning.rubric import Rubric, invalid_move
from sp_lightning.types import Completion, Rollout, Step, LEARNER

# Every game's move vocabulary (braces left out: they are the box's own delimiters).
MOVES = sorted({m for cls in GAMES.values() for m in cls.game_info.moves if not set(m) & set("{}")})
OBS = "Board:\n[1] [2] x\nLegal moves: [1] [2]"

# Noise made of the pieces that could confuse a parser, plus arbitrary characters.
_PIECES = ["<think>", "</think>", "\\boxed{", "{", "}", "[", "]", "\\", "\n", " ", "[4]", "[bet]", "[]"]
noise = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=5)), max_size=12).map("".join)
_TAGS = ("<think>", "</think>", "\\boxed{")
# The same noise without the tags: it may sit around the answer without moving it.
answer_noise = st.lists(
    st.one_of(st.sampled_from([p for p in _PIECES if p not in _TAGS]), st.text(max_size=5)), max_size=12
).map("".join)
moves = st.sampled_from(MOVES)


# ---- messages ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_messages_shape(name):
    template = make_template(name, system_prompt="You play.")
    messages = template.messages(OBS, "player_0")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in messages)
    assert messages[0]["content"] == "You play."
    expected = OBS + "\n\n" + template.instruction if template.instruction else OBS
    assert messages[1]["content"] == expected


def test_system_prompt_per_role_and_none():
    template = PlainTemplate(system_prompt={"player_0": "You are X."}, instruction="")
    assert template.messages(OBS, "player_0") == [
        {"role": "system", "content": "You are X."}, {"role": "user", "content": OBS}]
    assert template.messages(OBS, "player_1") == [{"role": "user", "content": OBS}]
    assert template.system_prompt_for("player_1") is None
    assert PlainTemplate().messages(OBS, "player_0") == [{"role": "user", "content": OBS}]  # the default
    assert PlainTemplate(instruction="Answer with [move].").messages(OBS, "player_0") == [
        {"role": "user", "content": OBS + "\n\nAnswer with [move]."}]


def test_reasoning_instruction_names_its_markers():
    instruction = ReasoningTemplate().instruction
    assert "<think>" in instruction and "</think>" in instruction and "\\boxed{[move]}" in instruction


# ---- plain: examples and fuzzing -----------------------------------------------------------


@pytest.mark.parametrize("text, well_formed", [
    ("[4]", True),
    ("I play [ Bet ] now", True),
    ("  [4]\n", True),
    ("[4] no, [7]", True),
    ("bet", False),
    ("", False),
    ("[" + "x" * 40 + "]", False),
])
def test_plain_examples(text, well_formed):
    result = PlainTemplate().parse(text)
    assert result == ParseResult(text, well_formed, "ok" if well_formed else "no [move] token")


@given(st.text())
def test_plain_never_raises_and_passes_text_through(text):
    result = PlainTemplate().parse(text)
    assert result.action_text == text
    assert result.well_formed == (parse_move(text) is not None)


@given(noise, moves, noise.map(lambda s: s.replace("[", "").replace("]", "")))
def test_plain_finds_a_move_in_noise(before, move, after):
    result = PlainTemplate().parse(before + move + after)
    assert result.well_formed
    assert parse_move(result.action_text) == move


@given(st.lists(moves, min_size=2, max_size=5), st.text(alphabet=st.characters(exclude_characters="[]")))
def test_plain_last_move_wins(several, sep):
    result = PlainTemplate().parse(sep.join(several))
    assert parse_move(result.action_text) == several[-1]


@pytest.mark.parametrize("template", [PlainTemplate(), ReasoningTemplate()])
@pytest.mark.parametrize("value", [None, b"[4]", 4, ["[4]"]])
def test_non_str_is_no_action_not_a_crash(template, value):
    result = template.parse(value)
    assert result.action_text is None and not result.well_formed


# ---- reasoning: examples and fuzzing -------------------------------------------------------


@pytest.mark.parametrize("text, action, well_formed", [
    ("<think>centre is best: [5]</think>\\boxed{[5]}", "[5]", True),
    ("<think>\nmaybe \\boxed{[1]}?\n</think>\n\nSo: \\boxed{[ Bet ]}", "[ Bet ]", True),
    ("thinking started in the prompt</think> \\boxed{[3]}", "[3]", True),  # Qwen3 thinking models
    ("<think>a</think>\\boxed{[1]} or rather \\boxed{[2]}", "[2]", True),  # last box wins
    ("<think>a</think>\\boxed{\\text{[call]}}", "\\text{[call]}", True),  # nested braces
    ("<think>a</think>\\boxed{[1]} \\boxed{[2]", "[1]", True),  # an unclosed box is ignored
    ("<think>a</think>\\boxed{4}", "4", False),  # no brackets: the env will reject it
    ("\\boxed{[4]}", "[4]", False),  # no thinking
    ("<think>I pick \\boxed{[4]} and stop", None, False),  # cut off while thinking
    ("<think>[4]</think> my move is [4]", None, False),  # a bare move is not an answer
    ("<think>a</think>\\boxed{[1]}<think>\\boxed{[2]}", "[1]", True),  # a second thinking block
    ("", None, False),
])
def test_reasoning_examples(text, action, well_formed):
    result = ReasoningTemplate().parse(text)
    assert (result.action_text, result.well_formed) == (action, well_formed), result.reason
    assert (result.reason == "ok") == well_formed


def test_reasoning_without_required_thinking():
    result = ReasoningTemplate(require_think=False).parse("\\boxed{[4]}")
    assert result == ParseResult("[4]", True, "ok")


@settings(max_examples=300)
@given(st.text())
def test_reasoning_never_raises_and_answers_only_from_after_the_thinking(text):
    result = ReasoningTemplate().parse(text)
    assert isinstance(result, ParseResult) and isinstance(result.reason, str)
    if result.action_text is not None:
        assert result.action_text in text.rpartition("</think>")[2]
    if result.well_formed:
        assert "</think>" in text and parse_move(result.action_text) is not None


@settings(max_examples=300)
@given(noise)
def test_reasoning_never_raises_on_adversarial_noise(text):
    result = ReasoningTemplate().parse(text)
    if result.action_text is not None:
        assert result.action_text in text.rpartition("</think>")[2].partition("<think>")[0]


@given(noise, answer_noise, moves, answer_noise)
def test_reasoning_finds_the_boxed_move_in_noise(thinking, before, move, after):
    assume("</think>" not in thinking)
    assume(not any(tag in before + after for tag in _TAGS))  # e.g. "\\" + "boxed{" from st.text
    text = f"<think>{thinking}</think>{before}\\boxed{{{move}}}{after}"
    result = ReasoningTemplate().parse(text)
    assert result.well_formed, result.reason
    assert result.action_text == move and parse_move(result.action_text) == move


@given(st.lists(moves, min_size=1, max_size=4), noise, moves)
def test_reasoning_ignores_moves_inside_the_thinking(thought_moves, filler, final):
    assume("</think>" not in filler)
    thinking = filler.join(f"\\boxed{{{m}}} {m}" for m in thought_moves)
    no_answer = ReasoningTemplate().parse(f"<think>{thinking}</think> so I play {final}")
    assert no_answer.action_text is None and not no_answer.well_formed
    answered = ReasoningTemplate().parse(f"<think>{thinking}</think>\\boxed{{{final}}}")
    assert answered.action_text == final and answered.well_formed


@given(st.lists(moves, min_size=2, max_size=4))
def test_reasoning_last_box_of_the_answer_wins(several):
    answer = " then ".join(f"\\boxed{{{m}}}" for m in several)
    assert ReasoningTemplate().parse(f"<think>x</think>{answer}").action_text == several[-1]


def test_last_boxed_examples():
    assert last_boxed("\\boxed{[1]} \\boxed{[2]") == "[1]"
    assert last_boxed("}}{\\boxed{a{b}c}") == "a{b}c"
    assert last_boxed("\\boxed{}") == ""
    assert last_boxed("boxed{[1]}") is None


def test_parse_result_drives_the_env_without_crashing():
    """A move read by the template is played; no answer reaches the env as None, an invalid move."""
    template = ReasoningTemplate()
    env = make("tictactoe_v1", invalid_move="retry")
    env.reset(seed=0)
    legal = env.infos[env.agent_selection]["legal_actions"]
    env.step(template.parse(f"<think>{legal[-1]}</think>\\boxed{{{legal[0]}}}").action_text)
    assert env.infos["player_0"]["parsed_move"] == legal[0]
    assert not env.infos["player_0"]["invalid_move"]
    env.step(template.parse(f"<think>{legal[-1]} is good").action_text)
    assert env.infos["player_1"]["invalid_move"]


# ---- make_template and the format reward ---------------------------------------------------


def test_make_template():
    assert isinstance(make_template("plain"), PlainTemplate)
    reasoning = make_template("reasoning", system_prompt=None, require_think=False)
    assert isinstance(reasoning, ReasoningTemplate) and reasoning.system_prompt is None
    assert isinstance(make_template("sp_lightning.prompts.ReasoningTemplate"), ReasoningTemplate)
    same = PlainTemplate()
    assert make_template(same) is same
    with pytest.raises(ValueError, match="instance and kwargs"):
        make_template(same, instruction="x")
    with pytest.raises(ValueError, match="expected one of plain, reasoning"):
        make_template("chain_of_thought")
    with pytest.raises(ValueError, match="cannot load"):
        make_template("no_such_pkg.Template")
    with pytest.raises(ValueError, match="PromptTemplate subclass"):
        make_template("sp_lightning.types.Step")
    assert issubclass(TEMPLATES["plain"], PromptTemplate)


def test_format_reward_with_invalid_move_penalty():
    """steps: well formed and legal -> 0.5*1 = 0.5; malformed and invalid -> 0 + 2*-1 = -2;
    no well_formed key (e.g. a bot) -> 0."""
    steps = [
        Step("player_0", Completion("<think>a</think>\\boxed{[1]}"), info={"well_formed": True}),
        Step("player_1", Completion("hmm"), info={"well_formed": False, "invalid_move": True}),
        Step("player_0", Completion("[2]")),
    ]
    assert [format_reward(s) for s in steps] == [1.0, 0.0, 0.0]
    rollout = Rollout("tictactoe_v1", steps=steps, seats={"player_0": LEARNER, "player_1": LEARNER},
                      outcome={"player_0": 1.0, "player_1": -1.0})
    Rubric(step=[(format_reward, 0.5), (invalid_move, 2.0)]).score(rollout)
    assert [s.reward for s in rollout.steps] == [0.5, -2.0, 0.0]


@pytest.mark.parametrize("name, kwargs", [("plain", {}), ("reasoning", {}), ("reasoning", {"require_think": False})])
@pytest.mark.parametrize("move", ["[4]", "[b2]", "[Bet]", "[A PAR - BUR]"])
def test_a_templates_answer_to_a_move_parses_back_to_that_move_well_formed(name, kwargs, move):
    """What imitating a bot trains a model to write (``answer``) is what the template reads as the move."""
    template = make_template(name, **kwargs)
    assert template.parse(template.answer(move)) == ParseResult(move, True, "ok")
