/* cmd_membership.h: `weft membership`, the membership service of elastic
 * allreduce on its own (a Kubernetes pod beside the workers). */
#ifndef WF_CMD_MEMBERSHIP_H
#define WF_CMD_MEMBERSHIP_H

#include "common/error.h"

int wf_cmd_membership(int argc, char **argv, wf_err *err);

#endif
