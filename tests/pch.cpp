// SPDX-License-Identifier: Apache-2.0
// The object library whose precompiled headers every test executable reuses.
