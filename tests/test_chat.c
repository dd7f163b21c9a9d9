/* Chat rendering against strings derived by hand from the model's chat_template.jinja
 * (docs/MODEL.md, "Prompt"), and the continuation string used to reuse a KV cache across turns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/chat.h"

#define IMG "<|vision_start|><|image_pad|><|vision_end|>"

static qvl_chat *new_chat(void) {
    qvl_chat *c = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_chat_create(&c, &err), QVL_OK);
    assert_non_null(c);
    return c;
}

static void add(qvl_chat *c, qvl_chat_role role, const char *text) {
    qvl_error err = {0};
    assert_int_equal(qvl_chat_add(c, role, text, &err), QVL_OK);
}

static void add_image(qvl_chat *c) {
    qvl_error err = {0};
    assert_int_equal(qvl_chat_add_image(c, &err), QVL_OK);
}

static void add_text(qvl_chat *c, const char *text) {
    qvl_error err = {0};
    assert_int_equal(qvl_chat_add_text(c, text, &err), QVL_OK);
}

/* Render and compare with the expected string; also checks the reported length. */
static void expect_render(const qvl_chat *c, bool gen_prompt, const char *want) {
    char *got = NULL;
    size_t len = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_chat_render(c, gen_prompt, &got, &len, &err), QVL_OK);
    assert_string_equal(got, want);
    assert_int_equal(len, strlen(want));
    free(got);
}

/* The rendered example of docs/MODEL.md, "Prompt": one user message, an image then a question. */
static void test_image_then_text(void **state) {
    (void)state;
    qvl_chat *c = new_chat();
    add_image(c);
    add_text(c, "Describe this image.");
    assert_int_equal(qvl_chat_count(c), 1);
    assert_int_equal(qvl_chat_image_count(c), 1);
    assert_int_equal(qvl_chat_role_of(c, 0), QVL_CHAT_USER);
    expect_render(c, true,
                  "<|im_start|>user\n" IMG "Describe this image.<|im_end|>\n<|im_start|>assistant\n");
    expect_render(c, false, "<|im_start|>user\n" IMG "Describe this image.<|im_end|>\n");
    qvl_chat_free(c);
}

/* A system prompt is only written when given (no default one in Qwen3-VL). */
static void test_system_prompt(void **state) {
    (void)state;
    qvl_chat *c = new_chat();
    add(c, QVL_CHAT_SYSTEM, "You are a helpful assistant.");
    add(c, QVL_CHAT_USER, "Hi");
    expect_render(c, true,
                  "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    qvl_chat_free(c);

    c = new_chat();
    add(c, QVL_CHAT_USER, "Hi");
    expect_render(c, true, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    qvl_chat_free(c);
}

/* Several turns, parts in order with no separators, assistant text verbatim (a </think>
 * inside it is kept: the Instruct template does not strip reasoning). */
static void test_multi_turn(void **state) {
    (void)state;
    qvl_chat *c = new_chat();
    add(c, QVL_CHAT_SYSTEM, "S");
    add(c, QVL_CHAT_USER, "a");
    add_image(c);
    add_image(c);
    add_text(c, "b");
    add(c, QVL_CHAT_ASSISTANT, "<think>\nr\n</think>\n\nA1");
    add_image(c); /* last message is the assistant's: starts a new user message */
    add_text(c, "q2");
    assert_int_equal(qvl_chat_count(c), 4);
    assert_int_equal(qvl_chat_image_count(c), 3);
    assert_int_equal(qvl_chat_role_of(c, 3), QVL_CHAT_USER);
    const char *want = "<|im_start|>system\nS<|im_end|>\n"
                       "<|im_start|>user\na" IMG IMG "b<|im_end|>\n"
                       "<|im_start|>assistant\n<think>\nr\n</think>\n\nA1<|im_end|>\n"
                       "<|im_start|>user\n" IMG "q2<|im_end|>\n";
    expect_render(c, false, want);

    /* add_vision_id numbers the images over the whole conversation */
    qvl_chat_set_add_vision_id(c, true);
    expect_render(c, false,
                  "<|im_start|>system\nS<|im_end|>\n"
                  "<|im_start|>user\naPicture 1: " IMG "Picture 2: " IMG "b<|im_end|>\n"
                  "<|im_start|>assistant\n<think>\nr\n</think>\n\nA1<|im_end|>\n"
                  "<|im_start|>user\nPicture 3: " IMG "q2<|im_end|>\n");
    qvl_chat_free(c);
}

/* Empty contents render as empty turns, as the template does with content "". */
static void test_empty_contents(void **state) {
    (void)state;
    qvl_chat *c = new_chat();
    add(c, QVL_CHAT_USER, "");
    add(c, QVL_CHAT_ASSISTANT, NULL);
    expect_render(c, true,
                  "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"
                  "<|im_start|>assistant\n");
    qvl_chat_free(c);
}

static void test_errors(void **state) {
    (void)state;
    qvl_error err = {0};
    char *out = NULL;
    qvl_chat *c = new_chat();

    assert_int_equal(qvl_chat_render(c, true, &out, NULL, &err), QVL_E_INVALID);
    assert_null(out);
    assert_int_equal(qvl_chat_add_text(c, "x", &err), QVL_E_INVALID);
    assert_int_equal(qvl_chat_count(c), 0);

    add(c, QVL_CHAT_USER, "u");
    /* the template would silently drop a later system message: refused instead */
    assert_int_equal(qvl_chat_add(c, QVL_CHAT_SYSTEM, "late", &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "system"));
    assert_int_equal(qvl_chat_count(c), 1);
    assert_int_equal(qvl_chat_add(c, (qvl_chat_role)42, "x", &err), QVL_E_INVALID);
    assert_int_equal(qvl_chat_count(c), 1);

    assert_int_equal(qvl_chat_render_since(c, 2, false, &out, NULL, &err), QVL_E_INVALID);
    assert_null(out);
    expect_render(c, false, "<|im_start|>user\nu<|im_end|>\n");
    qvl_chat_free(c);
    qvl_chat_free(NULL);
}

/* render(all) == render(messages before k) + render_since(k) at every cut k. */
static void test_render_since_splits(void **state) {
    (void)state;
    const char *texts[] = {"sys", "u1", "a1", "u2", "a2", "u3"};
    const qvl_chat_role roles[] = {QVL_CHAT_SYSTEM, QVL_CHAT_USER, QVL_CHAT_ASSISTANT,
                                   QVL_CHAT_USER, QVL_CHAT_ASSISTANT, QVL_CHAT_USER};
    const size_t n = sizeof texts / sizeof texts[0];
    for (int vision_id = 0; vision_id <= 1; vision_id++) {
        qvl_chat *all = new_chat();
        qvl_chat_set_add_vision_id(all, vision_id);
        for (size_t i = 0; i < n; i++) {
            add(all, roles[i], texts[i]);
            if (roles[i] == QVL_CHAT_USER) add_image(all);
        }
        char *full = NULL;
        qvl_error err = {0};
        assert_int_equal(qvl_chat_render(all, true, &full, NULL, &err), QVL_OK);
        for (size_t k = 1; k <= n; k++) {
            qvl_chat *head = new_chat();
            qvl_chat_set_add_vision_id(head, vision_id);
            for (size_t i = 0; i < k; i++) {
                add(head, roles[i], texts[i]);
                if (roles[i] == QVL_CHAT_USER) add_image(head);
            }
            char *prefix = NULL, *tail = NULL;
            assert_int_equal(qvl_chat_render(head, false, &prefix, NULL, &err), QVL_OK);
            assert_int_equal(qvl_chat_render_since(all, k, true, &tail, NULL, &err), QVL_OK);
            size_t lp = strlen(prefix);
            assert_int_equal(lp + strlen(tail), strlen(full));
            assert_memory_equal(full, prefix, lp);
            assert_string_equal(full + lp, tail);
            free(prefix);
            free(tail);
            qvl_chat_free(head);
        }
        free(full);
        qvl_chat_free(all);
    }
    /* from the end: only the generation prompt */
    qvl_chat *c = new_chat();
    add(c, QVL_CHAT_USER, "u");
    char *tail = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_chat_render_since(c, 1, true, &tail, NULL, &err), QVL_OK);
    assert_string_equal(tail, "<|im_start|>assistant\n");
    free(tail);
    assert_int_equal(qvl_chat_render_since(c, 1, false, &tail, NULL, &err), QVL_OK);
    assert_string_equal(tail, "");
    free(tail);
    qvl_chat_free(c);
}

/* The KV-cache continuation: cached prompt + generated text + continuation == full render. */
static void test_continuation(void **state) {
    (void)state;
    qvl_error err = {0};
    qvl_chat *c = new_chat();
    add_image(c);
    add_text(c, "q1");
    char *first_prompt = NULL;
    assert_int_equal(qvl_chat_render(c, true, &first_prompt, NULL, &err), QVL_OK);

    const char *reply = "A cat.";
    add(c, QVL_CHAT_ASSISTANT, reply); /* message 1 */
    add(c, QVL_CHAT_USER, "q2");       /* message 2 */
    add_image(c);

    char *cont = NULL;
    size_t cont_len = 0;
    assert_int_equal(qvl_chat_render_continuation(c, 2, true, &cont, &cont_len, &err), QVL_OK);
    assert_string_equal(cont, "<|im_end|>\n<|im_start|>user\nq2" IMG "<|im_end|>\n<|im_start|>assistant\n");
    assert_int_equal(cont_len, strlen(cont));

    char *full = NULL;
    assert_int_equal(qvl_chat_render(c, true, &full, NULL, &err), QVL_OK);
    size_t n1 = strlen(first_prompt), n2 = strlen(reply);
    assert_int_equal(n1 + n2 + cont_len, strlen(full));
    assert_memory_equal(full, first_prompt, n1);
    assert_memory_equal(full + n1, reply, n2);
    assert_string_equal(full + n1 + n2, cont);

    /* the message before `first` must be the generated reply */
    char *bad = NULL;
    assert_int_equal(qvl_chat_render_continuation(c, 0, true, &bad, NULL, &err), QVL_E_INVALID);
    assert_int_equal(qvl_chat_render_continuation(c, 1, true, &bad, NULL, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "assistant"));
    assert_int_equal(qvl_chat_render_continuation(c, 4, true, &bad, NULL, &err), QVL_E_INVALID);
    assert_null(bad);
    /* right after the reply, with nothing new yet: just the closing of the reply */
    qvl_chat *d = new_chat();
    add(d, QVL_CHAT_USER, "u");
    add(d, QVL_CHAT_ASSISTANT, "r");
    assert_int_equal(qvl_chat_render_continuation(d, 2, false, &bad, NULL, &err), QVL_OK);
    assert_string_equal(bad, "<|im_end|>\n");
    free(bad);
    qvl_chat_free(d);

    free(first_prompt);
    free(cont);
    free(full);
    qvl_chat_free(c);
}

/* Many messages and long texts: the buffers grow. */
static void test_growth(void **state) {
    (void)state;
    qvl_chat *c = new_chat();
    size_t big = 100000;
    char *text = malloc(big + 1);
    assert_non_null(text);
    memset(text, 'x', big);
    text[big] = '\0';
    add(c, QVL_CHAT_USER, text);
    for (int i = 0; i < 500; i++) {
        add(c, QVL_CHAT_ASSISTANT, "a");
        add(c, QVL_CHAT_USER, "u");
        add_image(c);
    }
    assert_int_equal(qvl_chat_count(c), 1001);
    assert_int_equal(qvl_chat_image_count(c), 500);
    char *out = NULL;
    size_t len = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_chat_render(c, true, &out, &len, &err), QVL_OK);
    size_t turn_a = strlen("<|im_start|>assistant\na<|im_end|>\n");
    size_t turn_u = strlen("<|im_start|>user\nu" IMG "<|im_end|>\n");
    size_t want = strlen("<|im_start|>user\n") + big + strlen("<|im_end|>\n") + 500 * (turn_a + turn_u) +
                  strlen("<|im_start|>assistant\n");
    assert_int_equal(len, want);
    assert_int_equal(strlen(out), want);
    free(out);
    free(text);
    qvl_chat_free(c);
}


/* Tools: what chat_template.jinja renders (Jinja with trim_blocks and lstrip_blocks, tojson as
 * Python's json.dumps) for tools, tool calls after empty and non-empty text, and consecutive
 * tool results, with and without a system message. */
#define TOOL_LINES                                                                               \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "        \
    "\"Weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "     \
    "{\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"minimum\": 1}}, \"required\": "    \
    "[\"city\"]}}}\n{\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": "    \
    "{\"type\": \"object\", \"properties\": {}}}}"
#define TOOLS_HEAD                                                                               \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "     \
    "provided with function signatures within <tools></tools> XML tags:\n<tools>\n" TOOL_LINES   \
    "\n</tools>\n\nFor each function call, return a json object with function name and "          \
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "                \
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
#define CALL_WEATHER "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
#define CALL_NOW "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"

static void add_call(qvl_chat *c, const char *name, const char *args) {
    qvl_error err = {0};
    assert_int_equal(qvl_chat_add_tool_call(c, name, args, &err), QVL_OK);
}

static void test_tools(void **state) {
    (void)state;
    qvl_error err = {0};
    qvl_chat *c = new_chat();
    assert_int_equal(qvl_chat_set_tools(c, TOOL_LINES, &err), QVL_OK);
    add(c, QVL_CHAT_SYSTEM, "Be brief.");
    add(c, QVL_CHAT_USER, "Weather in Paris?");
    add(c, QVL_CHAT_ASSISTANT, "");
    add_call(c, "get_weather", "{\"city\": \"Paris\"}");
    add_call(c, "now", "{}");
    add(c, QVL_CHAT_TOOL, "sunny");
    add(c, QVL_CHAT_TOOL, "noon");
    add(c, QVL_CHAT_ASSISTANT, "Sunny.");
    add_call(c, "now", "{}");
    add(c, QVL_CHAT_TOOL, "1pm");
    static const char want[] =
        "<|im_start|>system\nBe brief.\n\n" TOOLS_HEAD
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n" CALL_WEATHER "\n" CALL_NOW "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nnoon\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nSunny.\n" CALL_NOW "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n1pm\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n";
    expect_render(c, true, want);
    /* render_since stays a suffix of the whole rendering, also inside a run of tool results */
    for (size_t first = 1; first <= qvl_chat_count(c); first++) {
        char *tail = NULL;
        assert_int_equal(qvl_chat_render_since(c, first, true, &tail, NULL, &err), QVL_OK);
        assert_true(strlen(tail) <= strlen(want));
        assert_string_equal(tail, want + strlen(want) - strlen(tail));
        free(tail);
    }
    qvl_chat_free(c);

    c = new_chat(); /* no system message: the tools turn alone */
    assert_int_equal(qvl_chat_set_tools(c, TOOL_LINES, &err), QVL_OK);
    add(c, QVL_CHAT_USER, "Weather in Paris?");
    add(c, QVL_CHAT_ASSISTANT, NULL);
    add_call(c, "get_weather", "{\"city\": \"Paris\"}");
    add_call(c, "now", "{}");
    expect_render(c, true, "<|im_start|>system\n" TOOLS_HEAD
                           "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                           "<|im_start|>assistant\n" CALL_WEATHER "\n" CALL_NOW "<|im_end|>\n"
                           "<|im_start|>assistant\n");
    /* a tool call belongs to an assistant message */
    add(c, QVL_CHAT_USER, "and?");
    assert_int_equal(qvl_chat_add_tool_call(c, "now", "{}", &err), QVL_E_INVALID);
    qvl_chat_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_image_then_text),
        cmocka_unit_test(test_system_prompt),
        cmocka_unit_test(test_multi_turn),
        cmocka_unit_test(test_empty_contents),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_render_since_splits),
        cmocka_unit_test(test_continuation),
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_tools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
