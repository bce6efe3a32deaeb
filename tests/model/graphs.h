/* graphs.h: graph JSON documents shared by the model tests. */
#ifndef WF_TEST_MODEL_GRAPHS_H
#define WF_TEST_MODEL_GRAPHS_H

/* Every layer type, listed out of order, with a tensor ("r1") consumed by
 * three layers and a concat of one tensor with itself. */
static const char *const kitchen_sink =
	"{\"format\": 1, \"input_shape\": [9, 9, 3], \"classes\": 5, \"output\": \"logits\","
	" \"layers\": ["
	"  {\"name\": \"logits\", \"type\": \"dense\", \"inputs\": [\"drop\"], \"config\": "
	"{\"units\": 5}},"
	"  {\"name\": \"image\", \"type\": \"input\", \"inputs\": []},"
	"  {\"name\": \"pad\", \"type\": \"zeropad\", \"inputs\": [\"image\"], \"config\": "
	"{\"padding\": [[1, 0], [0, 1]]}},"
	"  {\"name\": \"c1\", \"type\": \"conv2d\", \"inputs\": [\"pad\"], \"config\": "
	"{\"filters\": 6, \"kernel_size\": 3, \"strides\": [2, 2], \"padding\": \"same\"}},"
	"  {\"name\": \"bn1\", \"type\": \"batchnorm\", \"inputs\": [\"c1\"]},"
	"  {\"name\": \"r1\", \"type\": \"relu6\", \"inputs\": [\"bn1\"]},"
	"  {\"name\": \"dw\", \"type\": \"conv2d\", \"inputs\": [\"r1\"], \"config\": "
	"{\"filters\": 6, \"kernel_size\": [3, 3], \"groups\": 6, \"dilation_rate\": 1, "
	"\"padding\": \"same\", \"use_bias\": false}},"
	"  {\"name\": \"sum\", \"type\": \"add\", \"inputs\": [\"dw\", \"r1\"]},"
	"  {\"name\": \"cat\", \"type\": \"concat\", \"inputs\": [\"sum\", \"r1\", \"r1\"]},"
	"  {\"name\": \"mp\", \"type\": \"maxpool\", \"inputs\": [\"cat\"], \"config\": "
	"{\"pool_size\": [2, 2], \"strides\": null, \"padding\": \"same\"}},"
	"  {\"name\": \"ap\", \"type\": \"avgpool\", \"inputs\": [\"cat\"], \"config\": "
	"{\"pool_size\": 3, \"strides\": 1}},"
	"  {\"name\": \"crop\", \"type\": \"crop\", \"inputs\": [\"mp\"], \"config\": "
	"{\"cropping\": [[1, 0], [0, 1]]}},"
	"  {\"name\": \"g1\", \"type\": \"gap\", \"inputs\": [\"crop\"]},"
	"  {\"name\": \"f2\", \"type\": \"flatten\", \"inputs\": [\"ap\"]},"
	"  {\"name\": \"d2\", \"type\": \"dense\", \"inputs\": [\"f2\"], \"config\": "
	"{\"units\": 18, \"use_bias\": true}},"
	"  {\"name\": \"both\", \"type\": \"add\", \"inputs\": [\"g1\", \"d2\"]},"
	"  {\"name\": \"bn2\", \"type\": \"batchnorm\", \"inputs\": [\"both\"], \"config\": "
	"{\"epsilon\": 0.001, \"momentum\": 0.9}},"
	"  {\"name\": \"relu\", \"type\": \"relu\", \"inputs\": [\"bn2\"]},"
	"  {\"name\": \"drop\", \"type\": \"dropout\", \"inputs\": [\"relu\"], \"config\": "
	"{\"rate\": 0.25}}"
	"]}";

#endif
