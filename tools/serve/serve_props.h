/* GET /props: llama-server's server properties, the fields that mean something here. */
#ifndef QVL_SERVE_PROPS_H
#define QVL_SERVE_PROPS_H

#include "serve_http.h"

/* {"default_generation_settings": {n_ctx, params: {...}}, "total_slots", "model_path",
 * "model_alias", "modalities": {"vision", "audio"}, "chat_template", "build_info", ...};
 * malloc'd, NULL when out of memory. Needs a READY engine. */
char *serve_props_json(serve_server *s);

#endif
