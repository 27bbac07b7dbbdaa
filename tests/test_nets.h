/* Networks defined only in the tests. */
#ifndef TESTS_TEST_NETS_H
#define TESTS_TEST_NETS_H

#include "../model/net.h"

/* "test-net": a miniature of the airbench94 architecture that uses every generalised op: a
 * frozen 2x2 convolution with a trained bias (32 -> 31), GELU, a conv-pool-BN-GELU-conv-BN-GELU
 * group with bias-free 3x3 convolutions and scale-free batch norm (eps 1e-12, momentum 0.4),
 * a 3x3 max pool (15 -> 5), and a bias-free linear layer scaled by 1/9. Its PyTorch twin is in
 * tests/torch_reference.py. */
extern const struct net_def test_net;

/* test_net or a known network (net_find) by name; NULL if neither. */
const struct net_def *test_nets_find(const char *name);

#endif
