/*
 * The names of request outcomes (tbl/outcomes.h), for the logs and the
 * status page.  A file of its own: the logs read it, and must not depend
 * on the request core that writes them.
 */
#include "config.h"

#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/req.h"

static const char *const outcome_names[REQ_O__N] = {
#define OUTCOME(name, doc) [REQ_O_##name] = #name,
#include "surogat/tbl/outcomes.h"
};

const char *
req_outcome_name(enum req_outcome o)
{
    SRG_ASSERT(o < REQ_O__N);
    return (o == REQ_O_NONE ? "-" : outcome_names[o]);
}

enum req_outcome
req_outcome_parse(const char *name, size_t len)
{
    for (int o = REQ_O_NONE + 1; o < REQ_O__N; o++)
        if (strlen(outcome_names[o]) == len && strncasecmp(outcome_names[o], name, len) == 0)
            return ((enum req_outcome)o);
    return (REQ_O__N);
}
