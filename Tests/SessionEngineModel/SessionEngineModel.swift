/// The model harness shared by the test suite and SessionEngineSchedules.
package enum SessionEngineModel {}
