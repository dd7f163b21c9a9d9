#!/usr/bin/env python3
"""qvl serve's structured output and tool calls through the official OpenAI Python client (pinned
into .pydeps by scripts/install-pydeps.sh), on a random-weight model with the real Qwen3-VL
tokenizer:

  client.beta.chat.completions.parse with a Pydantic model: the answer parses into the model
  (the client sends the model's JSON Schema as response_format json_schema, strict);
  tool calling with tool_choice required and a named function: the client's typed tool calls,
  arguments that validate, and a second turn with the tool's result;
  a streamed tool call read through the client's chunk types.

usage: serve_openai_test.py QVL_BINARY SHARED_DATA_DIR WORK_DIR
Skips (77) without the tokenizer or the openai package."""
import json
import os
import sys
from typing import List, Literal, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), ".pydeps"))
import serve_util  # noqa: E402

try:
    import openai
    import pydantic
except ImportError as e:
    print(f"skip: the openai client is not installed ({e}); run scripts/install-deps.sh")
    sys.exit(77)

QVL, SHARED, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
check = serve_util.Checks()


class Pet(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=8)
    kind: Literal["cat", "dog", "fish"]
    age: int = pydantic.Field(ge=0, le=30)


class Household(pydantic.BaseModel):
    pets: List[Pet] = pydantic.Field(max_length=2)
    owner: Optional[str] = pydantic.Field(max_length=8)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 10},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}, "strict": True}}


def test_parse(client):
    for temp, seed in [(0, 1), (1, 2), (1, 3)]:
        name = f"beta.chat.completions.parse, temperature {temp} seed {seed}"
        try:
            r = client.beta.chat.completions.parse(
                model="tiny", messages=[{"role": "user", "content": "Describe a household."}],
                response_format=Household, temperature=temp, seed=seed, max_tokens=400)
        except Exception as e:  # noqa: BLE001 - any failure is the check's
            check(name, False, repr(e))
            continue
        msg = r.choices[0].message
        check(f"{name}: {msg.content}", isinstance(msg.parsed, Household) and
              r.choices[0].finish_reason == "stop", (msg, r.choices[0].finish_reason))


def test_tools(client):
    for choice in ["required", {"type": "function", "function": {"name": "get_weather"}}]:
        name = f"tool_choice {json.dumps(choice)}"
        r = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[WEATHER], tool_choice=choice, temperature=0, max_tokens=200,
            parallel_tool_calls=False)
        c = r.choices[0]
        calls = c.message.tool_calls or []
        ok = c.finish_reason == "tool_calls" and len(calls) == 1 and \
            calls[0].function.name == "get_weather" and calls[0].id.startswith("call_")
        if ok:
            args = json.loads(calls[0].function.arguments)
            ok = set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit") \
                and len(args["city"]) <= 10
        check(f"{name}: {[(x.function.name, x.function.arguments) for x in calls]}", ok, r)
        if not ok:
            continue
        second = client.chat.completions.create(
            model="tiny", tools=[WEATHER], temperature=0, max_tokens=6, messages=[
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": calls[0].id, "type": "function", "function": {
                        "name": "get_weather", "arguments": calls[0].function.arguments}}]},
                {"role": "tool", "tool_call_id": calls[0].id, "content": "12 degrees"}])
        check(f"{name}: a second turn with the tool's result",
              second.choices[0].message.content is not None and
              second.usage.prompt_tokens > r.usage.prompt_tokens, second)
        # the stream, assembled from the client's chunk objects, gives the same call
        got_name, got_args = None, ""
        for chunk in client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "Weather in Oslo?"}],
                tools=[WEATHER], tool_choice=choice, temperature=0, max_tokens=200,
                parallel_tool_calls=False, stream=True):
            for d in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                got_name = d.function.name or got_name
                got_args += d.function.arguments or ""
        check(f"{name}: streamed = whole", got_name == "get_weather" and
              got_args == calls[0].function.arguments, (got_name, got_args))


def main():
    def body(s, model):
        client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="none",
                               max_retries=0)
        test_parse(client)
        test_tools(client)
    return serve_util.run_on_tiny_model(QVL, SHARED, WORK, "openai",
                                        ["--backend", "reference", "--ctx", "2048"], check, body)


if __name__ == "__main__":
    sys.exit(main())
