# tests/local.mk — the test lists, included by Makefile.am.

# programs compiled and run, their outputs compared (tests/run-gsl.sh)
E2E_TESTS += tests/e2e/uneven.gsl tests/e2e/uneven_train.gsl tests/e2e/moe_signals.gsl tests/e2e/output_alias.gsl tests/e2e/bf16_ops.gsl tests/e2e/bf16_more.gsl \
	tests/e2e/elementwise.gsl tests/e2e/transcendental.gsl tests/e2e/broadcast.gsl \
	tests/e2e/matmul.gsl tests/e2e/reductions.gsl tests/e2e/softmax.gsl \
	tests/e2e/layout.gsl tests/e2e/indices.gsl tests/e2e/stdlib_nn.gsl \
	tests/e2e/functions.gsl tests/e2e/batches.gsl tests/e2e/scalars.gsl \
	tests/e2e/bad_input_shape.gsl tests/e2e/bad_mesh_size.gsl tests/e2e/unbound_input.gsl \
	tests/e2e/mlp_example.gsl tests/e2e/sharded_ops.gsl tests/e2e/permute.gsl \
	tests/e2e/moe_top2_drop.gsl tests/e2e/moe_top2_random.gsl tests/e2e/moe_top1.gsl \
	tests/e2e/moe_idle_expert.gsl tests/e2e/moe_bias.gsl tests/e2e/moe_mesh2d.gsl \
	tests/e2e/moe_mesh2d_a2a.gsl tests/e2e/moe_dense.gsl tests/e2e/moe_vmap.gsl tests/e2e/partial_sums.gsl \
	tests/e2e/optim.gsl tests/e2e/train_sgd.gsl tests/e2e/train_momentum.gsl tests/e2e/train_nesterov.gsl \
	tests/e2e/train_adam.gsl tests/e2e/train_adamw.gsl tests/e2e/train_nan.gsl tests/e2e/amax_tie3.gsl \
	tests/e2e/iota.gsl tests/e2e/loops.gsl tests/e2e/dropout.gsl \
	tests/e2e/moe_top3.gsl tests/e2e/moe_top4_zloss.gsl tests/e2e/moe_dropless.gsl tests/e2e/moe_shared.gsl
EXTRA_DIST += tests/e2e/mlp_check.c \
	tests/e2e/npy_load.h tests/e2e/moe_ref.h tests/e2e/philox_ref.h tests/e2e/moe_top2_drop_check.c tests/e2e/moe_top2_random_check.c \
	tests/e2e/moe_top1_check.c tests/e2e/moe_idle_expert_check.c tests/e2e/moe_bias_check.c \
	tests/e2e/moe_mesh2d_check.c tests/e2e/moe_mesh2d_a2a_check.c tests/e2e/moe_dense_check.c tests/e2e/optim_check.c \
	tests/e2e/bf16_more_check.c tests/e2e/dropout_check.c \
	tests/e2e/moe_top3_check.c tests/e2e/moe_top4_zloss_check.c tests/e2e/moe_dropless_check.c

# golden partitioner output: NAME.spmd (--emit-spmd), NAME.explain (--explain)
SPMD_TESTS += \
	tests/spmd/elementwise.gsl tests/spmd/contract_split.gsl tests/spmd/matmul_rows.gsl \
	tests/spmd/all_to_all.gsl tests/spmd/gather.gsl tests/spmd/local_slice.gsl \
	tests/spmd/reduce_scatter.gsl tests/spmd/megatron.gsl tests/spmd/propagate_chain.gsl \
	tests/spmd/permute.gsl tests/spmd/moe_experts.gsl tests/spmd/moe_mesh2d.gsl \
	tests/spmd/partial_pending.gsl tests/spmd/moe_train.gsl tests/spmd/uneven_train.gsl
SPMD_GOLDEN += tests/spmd/uneven_train.explain tests/spmd/uneven_train.stats tests/spmd/moe_train.explain tests/spmd/megatron.explain tests/spmd/reduce_scatter.explain \
	tests/spmd/propagate_chain.explain tests/spmd/moe_experts.explain tests/spmd/moe_mesh2d.explain \
	tests/spmd/partial_pending.explain

# golden global IR after sema and propagation: NAME.ir (--emit-ir)
IR_TESTS += tests/ir/expand.gsl tests/ir/inline.gsl tests/ir/propagate.gsl tests/ir/bf16.gsl \
	tests/ir/precision.gsl tests/ir/precision_moe.gsl

# compiled gradients against finite differences (tests/gradcheck.c)
GRAD_TESTS += tests/grad/unary.gsl tests/grad/binary.gsl tests/grad/select.gsl tests/grad/matmul.gsl \
	tests/grad/einsum.gsl tests/grad/reduce.gsl tests/grad/amax_tie.gsl tests/grad/indices.gsl \
	tests/grad/layout.gsl tests/grad/stacked.gsl tests/grad/nn.gsl tests/grad/attention_mask.gsl \
	tests/grad/transformer.gsl \
	tests/grad/sharded_dp.gsl tests/grad/sharded_ops.gsl tests/grad/sharded_2d.gsl \
	tests/grad/moe.gsl tests/grad/moe_drop.gsl tests/grad/moe_top1.gsl tests/grad/moe_sharded.gsl tests/grad/loop.gsl \
	tests/grad/dropout.gsl tests/grad/moe_top3.gsl
check_PROGRAMS += tests/gradcheck
tests_gradcheck_SOURCES = tests/gradcheck.c
tests_gradcheck_LDADD = -lm

# programs that must not compile, beside their expected diagnostics
ERROR_TESTS += \
	tests/errors/syntax_several.gsl tests/errors/lexical.gsl tests/errors/unknown_names.gsl \
	tests/errors/shapes.gsl tests/errors/inlined.gsl tests/errors/sharding.gsl tests/errors/train.gsl \
	tests/errors/overflow.gsl tests/errors/elem_limits.gsl tests/errors/uniform_bounds.gsl \
	tests/errors/inline_bound.gsl \
	tests/errors/flood.gsl tests/errors/moe.gsl tests/errors/iota.gsl tests/errors/bf16.gsl \
	tests/errors/schedule.gsl tests/errors/remat.gsl tests/errors/train_values.gsl tests/errors/loop_body.gsl tests/errors/loop_bounds.gsl tests/errors/loop_names.gsl tests/errors/loop_stmts.gsl \
	tests/errors/dropout.gsl tests/errors/moe_bias_rate.gsl

# scripts
SCRIPT_TESTS += tests/examples.sh tests/spmd_scaling.sh tests/outputs.sh \
	tests/gslc_output.sh tests/sema_limits.sh tests/stats.sh tests/memory.sh \
	tests/long_axis_name.sh tests/empty_program.sh tests/train_invariance.sh tests/zero_update.sh \
	tests/checkpoint.sh tests/checkpoint_dir.sh tests/faults.sh tests/lm_data.sh tests/lm.sh tests/layers.sh \
	tests/index_errors.sh tests/deep_compile.sh tests/precision.sh tests/moe_skip_empty.sh tests/loop_unroll.sh \
	tests/lm_baselines.sh tests/schedule.sh tests/moe_signals.sh tests/lm_script.sh \
	tests/lm_experts.sh tests/lm_torch_train.sh \
	tests/machine_file.sh tests/relocate.sh tests/kernels.sh tests/remat.sh tests/provenance.sh tests/provenance_run.sh \
	tests/health.sh tests/samebits.sh tests/samebits_errors.sh tests/dropout.sh

# gslc --auto-shard: plans known by hand, annotations kept, the examples without annotations as on one device
SCRIPT_TESTS += tests/auto_shard.sh tests/uneven_examples.sh
EXTRA_DIST += tests/auto/mlp.gsl tests/auto/moe.gsl tests/auto/lm.gsl tests/auto/budget.gsl tests/auto/slow.machine

# text generation: logits known by construction, a Python reference of the sampling, errors, examples/lm.gsl;
# beside a training run that prunes its checkpoints
SCRIPT_TESTS += tests/generate.sh tests/generate_live.sh
EXTRA_DIST += tests/generate_ref.py

# the runtime's collectives against a plain reference on 1, 2, 3 and 4 ranks
check_PROGRAMS += tests/collectives_test
tests_collectives_test_SOURCES = tests/collectives_test.c
tests_collectives_test_LDADD = runtime/libgslrt.a $(MPI_LIBS) $(RT_LIBS)
SCRIPT_TESTS += tests/collectives.sh

# the log line, --metrics, a non-finite loss and optimizer states, through a hand-written program
check_PROGRAMS += tests/train_log_prog
tests_train_log_prog_SOURCES = tests/train_log_prog.c
tests_train_log_prog_LDADD = runtime/libgslrt.a $(MPI_LIBS) $(RT_LIBS)
SCRIPT_TESTS += tests/train_log.sh
# a checkpoint's save and resume make a fixed number of the runtime's collectives, counted by a PMPI shim
SCRIPT_TESTS += tests/checkpoint_collectives.sh
EXTRA_DIST += tests/collective_count.c
# the program's build record in checkpoint manifests, and the note when a resume's program differs
SCRIPT_TESTS += tests/manifest_build.sh

# evaluation while training (--eval-input, --eval-every), through a hand-written program with gsl_eval
check_PROGRAMS += tests/eval_prog
tests_eval_prog_SOURCES = tests/eval_prog.c
tests_eval_prog_LDADD = runtime/libgslrt.a $(MPI_LIBS) $(RT_LIBS)
SCRIPT_TESTS += tests/eval.sh
EXTRA_DIST += tests/hand_prog.sh tests/lib.sh

# bf16 tensors: init, --input, --output, checkpoints and resume notes, through a hand-written program
check_PROGRAMS += tests/bf16_prog
tests_bf16_prog_SOURCES = tests/bf16_prog.c
tests_bf16_prog_LDADD = runtime/libgslrt.a $(MPI_LIBS) $(RT_LIBS)
SCRIPT_TESTS += tests/bf16.sh

# uneven shards (padded tiles): init, --input, index checks, --output, checkpoints across meshes, through a hand-written program
check_PROGRAMS += tests/uneven_prog
tests_uneven_prog_SOURCES = tests/uneven_prog.c
tests_uneven_prog_LDADD = runtime/libgslrt.a $(MPI_LIBS) $(RT_LIBS)
SCRIPT_TESTS += tests/uneven.sh

# gslrun: restarts from checkpoints after a rank killed, on fewer ranks after a host is gone; restarts
# exhausted; SIGTERM passed on
SCRIPT_TESTS += tests/gslrun.sh

# what gslrun and a program refuse and leave alone: --metrics into a checkpoint, a file the program refused, a
# held checkpoint lock (status 5), a program that cannot be run, a hostfile of no slots, a rank stopped in the start-up
SCRIPT_TESTS += tests/gslrun_refusals.sh

# how a run ends when MPI_Finalize or MPI_Abort never returns (tests/mpi_hang.c preloaded) and when its launcher is gone
SCRIPT_TESTS += tests/run_end.sh

# what a dropless moe block costs, as --stats and --explain tell it
SCRIPT_TESTS += tests/moe_dropless.sh

# a moe block's routing bias (bias_rate): a walk worked by hand, the balance of a router that favours two experts,
# a resume onto another mesh under --same-bits
SCRIPT_TESTS += tests/moe_bias_rate.sh
EXTRA_DIST += tests/mpi_hang.c

# several hosts simulated on this machine (tests/sim_hosts.sh: namespaces, veth links, hydra's ssh launcher
# through them, UCX over TCP): training across hosts, resumes across host counts, gslrun's restart after a
# remote rank's death and its shrink onto one host, a cut link; skipped (77) without root or namespaces
SCRIPT_TESTS += tests/multihost.sh
EXTRA_DIST += tests/sim_hosts.sh

# scripts/lm_plot.py on synthetic --metrics files: the loss panel and the router's load and routing panels
SCRIPT_TESTS += tests/lm_plot.sh
