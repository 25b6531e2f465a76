"""MXNet 1.9.1 operators symgrad does not register, each with the reason (read by tests/test_op_coverage.py).

``GROUPS``: a name pattern and the reason for every unregistered operator it matches. ``OPS``: single
operators and why they are left out. tests/test_op_coverage.py proves the lists complete (every operator in
``tests/fixtures/mxnet_operators.json`` is registered in symgrad or has a reason here) and current (no
reason is given for an operator symgrad registers).
"""

GROUPS = {
    r"^_backward_|^_contrib_backward_|_backward$": (
        "MXNet's hand-written backward kernels: symgrad builds every gradient as symbols from the op's own "
        "gradient rule (hidden `_backward_X` ops of its own only where a fused rule is needed)"
    ),
    r"^_np_|^_npi_|^_npx_": (
        "the NumPy-compatible front end (mx.np / mx.npx): NumPy semantics and names, a separate API from the "
        "symbolic 1.x operators symgrad honours"
    ),
    r"^_sparse_|^cast_storage$|^_square_sum$|^_contrib_getnnz$|^_contrib_SparseEmbedding$|^_scatter_": (
        "sparse storage (row_sparse / csr): symgrad holds dense numpy / CuPy arrays only"
    ),
    r"^_contrib_quantized_|^_contrib_requantize$|^_contrib_calibrate_entropy$|^_contrib_quantize_asym$": (
        "int8 inference kernels of MXNet's quantization flow (calibration, requantize): no gradients to check"
    ),
    r"^_sg_": "oneDNN / TensorRT graph-fusion nodes produced by MXNet's subgraph passes, never written by users",
    (
        r"update$|update_phase[12]$|^multi_lars$|^multi_sum_sq$|^multi_all_finite$|^_contrib_group_adagrad_update$|"
        r"^reset_arrays$"
    ): (
        "optimizer kernels (SGD, Adam, LAMB, ...) that update weights in place: not operators of a differentiated graph"
    ),
    r"^_cv|^_imdecode$": "OpenCV image decoding and file I/O (the data pipeline), not graph operators",
    r"^_contrib_dgl_|^_contrib_edge_id$": "DGL graph-sampling kernels on CSR adjacency matrices (sparse storage)",
}

OPS = {
    # -- graph machinery, not operators ------------------------------------------------------------------
    "_CachedOp": "Gluon's hybridized-graph runner (an executor inside a node), not an operator",
    "_CachedOpThreadSafe": "the thread-safe variant of _CachedOp",
    "_CrossDeviceCopy": "MXNet's inserted copy between devices of a group2ctx graph; symgrad binds one device",
    "_NoGradient": "MXNet's marker node for 'no gradient here'; symgrad's gradient rules return None instead",
    "_Native": "the pre-1.0 native-callback custom op (superseded by Custom, which symgrad has)",
    "_NDArray": "the pre-1.0 NDArray-callback custom op (superseded by Custom, which symgrad has)",
    "_CustomFunction": "autograd.Function's imperative node (NDArray API); symgrad has Custom for symbols",
    # -- imperative NDArray-only functions (no symbol form in MXNet) ------------------------------------
    "_copyto": "NDArray.copyto's in-place copy (imperative only)",
    "_set_value": "NDArray's fill-with-scalar (imperative only)",
    "fill_element_0index": "in-place NDArray helper of the old SoftmaxOutput examples (imperative only)",
    "_onehot_encode": "in-place NDArray one-hot of the pre-1.0 API (imperative only); one_hot is the operator",
    # -- kernels MXNet runs on GPU only or with state symgrad's backward does not keep ---------------------
    "_contrib_fft": "GPU-only in MXNet 1.9.1 (cuFFT): no CPU reference to prove it against",
    "_contrib_ifft": "GPU-only in MXNet 1.9.1 (cuFFT): no CPU reference to prove it against",
    "_contrib_count_sketch": "GPU-only in MXNet 1.9.1 (its CPU operator aborts): no CPU reference to prove it against",
    # -- random colour augmentations ------------------------------------------------------------------------
    "_image_random_hue": (
        "random hue rotation through an RGB-HLS round trip (MXNet's gradient is _copy): not yet; "
        "its derivative is piecewise (the HLS sector of each pixel)"
    ),
    "_image_random_color_jitter": "brightness, contrast, saturation and hue in random order: waits for hue",
    "IdentityAttachKLSparseReg": (
        "identity whose 'gradient' adds a KL sparsity penalty and updates a moving "
        "average inside backward (a regulariser, not a derivative; symgrad's backward "
        "keeps no state)"
    ),
}
