import Testing

@testable import SessionEngine

/// One named example per rule of the budget (Design/pool.md, *The budget* and *Outages*): the machine built as a
/// value, fed inputs at explicit times, its actions and counters checked. No task, no lock, no clock.
@Suite struct FetchBudgetStateMachineTests {
    typealias Machine = FetchBudget.StateMachine
    typealias Action = FetchBudget.StateMachine.Action

    /// A budget's limits; rates whose reciprocal is a binary fraction, so that every wait is exact.
    static func machine(
        inFlight: Int = 10, rate: Double = 4, burst: Int = 4, outageThreshold: Int? = nil, outageAccounts: Int = 3,
        probeInterval: Duration = .seconds(5)
    ) -> Machine {
        var limits = SessionPoolConfiguration.Budget(
            maximumInFlight: inFlight, startsPerSecond: rate, burst: burst, outageThreshold: outageThreshold,
            outageProbeInterval: probeInterval)
        limits.outageAccounts = outageAccounts
        return Machine(limits: limits, now: .zero)
    }

    // MARK: - Starting and queueing

    @Test func aFetchStartsAtOnceWhenNothingIsQueuedAndASlotAndATokenAreFree() {
        var machine = Self.machine(inFlight: 2, burst: 2)
        let a = machine.ticket(urgency: .proactive, deadline: .seconds(60), account: "a")
        #expect(machine.acquire(a, cancelled: false, at: .zero) == .startNow)
        #expect(machine.snapshot.inFlight == 1 && machine.snapshot.admitted == 1 && machine.snapshot.waits == 0)
        #expect(machine.tokens == 1)
        #expect(!machine.sleeping, "nothing waits, so no sleeper")
    }

    @Test func aFetchQueuesWhileEverySlotIsTakenAndGoesWhenOneIsReleased() {
        var machine = Self.machine(inFlight: 1)
        let a = machine.start("a", at: .zero)!
        let b = machine.ticket(urgency: .needed, deadline: .zero, account: "b")
        #expect(machine.acquire(b, cancelled: false, at: .zero) == .queued(Action()), "no sleeper: it waits for a slot")
        #expect(machine.snapshot.queuedNeeded == 1 && machine.snapshot.waits == 1)
        #expect(machine.release(a, outcome: .answered, waited: .zero, at: .seconds(1)) == Action(resume: [b.order]))
        #expect(machine.snapshot.inFlight == 1 && machine.snapshot.queuedNeeded == 0)
    }

    @Test func aFetchQueuesWithoutATokenAndOneSleeperWaitsForTheNextToken() {
        var machine = Self.machine(rate: 4, burst: 1)
        _ = machine.start("a", at: .zero)
        let b = machine.ticket(urgency: .needed, deadline: .zero, account: "b")
        #expect(
            machine.acquire(b, cancelled: false, at: .zero) == .queued(Action(startSleeper: .milliseconds(250))),
            "a quarter of a second to the next token at four a second")
        let c = machine.ticket(urgency: .needed, deadline: .zero, account: "c")
        #expect(
            machine.acquire(c, cancelled: false, at: .milliseconds(100)) == .queued(Action()),
            "one sleeper sleeps already")
        #expect(
            machine.sleeperFired(at: .milliseconds(250))
                == Action(resume: [b.order], startSleeper: .milliseconds(250)))
        #expect(machine.sleeperFired(at: .milliseconds(500)) == Action(resume: [c.order]))
        #expect(!machine.sleeping, "nothing waits")
    }

    @Test func theSleeperStopsOnceNothingWaits() {
        var machine = Self.machine(rate: 4, burst: 1)
        let a = machine.start("a", at: .zero)!
        let b = machine.queue("b", .needed, deadline: .zero, at: .zero)
        #expect(machine.sleeping, "b waits for the next token")
        #expect(machine.cancel(b) == .resumeCancelled(stopsSleeper: true), "b was the last fetch waiting")
        #expect(!machine.sleeping)
        // A fetch that waits again starts a sleeper again.
        let c = machine.ticket(urgency: .needed, deadline: .zero, account: "c")
        #expect(
            machine.acquire(c, cancelled: false, at: .milliseconds(100))
                == .queued(Action(startSleeper: .milliseconds(150))))
        // Admitted by a release once its token has come, before the sleeper fires: the sleeper stops too.
        #expect(
            machine.release(a, outcome: .answered, waited: .zero, at: .milliseconds(250))
                == Action(resume: [c.order], stopSleeper: true))
        #expect(!machine.sleeping)
    }

    @Test func theBucketRefillsAtTheRateAndHoldsAtMostTheBurst() {
        var machine = Self.machine(inFlight: 100, rate: 4, burst: 3)
        for name in ["a", "b", "c"] { _ = machine.start(AccountID(name), at: .zero) }
        #expect(machine.tokens == 0)
        let d = machine.ticket(urgency: .needed, deadline: .zero, account: "d")
        #expect(machine.acquire(d, cancelled: false, at: .zero) == .queued(Action(startSleeper: .milliseconds(250))))
        // Ten quiet seconds refill forty starts' worth, and the bucket keeps three of them.
        #expect(machine.sleeperFired(at: .seconds(10)) == Action(resume: [d.order]))
        #expect(machine.tokens == 2)
        for name in ["e", "f"] { #expect(machine.start(AccountID(name), at: .seconds(10)) != nil) }
        let g = machine.ticket(urgency: .needed, deadline: .zero, account: "g")
        #expect(
            machine.acquire(g, cancelled: false, at: .seconds(10)) == .queued(Action(startSleeper: .milliseconds(250))),
            "the fourth start after the quiet time waits for the rate")
    }

    @Test func noMoreThanBurstPlusRateStartsInAnyOneSecond() {
        var machine = Self.machine(inFlight: 100, rate: 4, burst: 3)
        var starts: [Duration] = []
        var now = Duration.zero
        var sleep: Duration?
        for index in 0..<40 {
            let ticket = machine.ticket(urgency: .needed, deadline: .zero, account: AccountID("\(index)"))
            switch machine.acquire(ticket, cancelled: false, at: now) {
            case .startNow: starts.append(now)
            case .queued(let action):
                starts += action.resume.map { _ in now }
                if let next = action.startSleeper { sleep = next }
            case .resumeCancelled: Issue.record("not cancelled")
            }
        }
        while let wait = sleep {
            now += wait
            let action = machine.sleeperFired(at: now)
            starts += action.resume.map { _ in now }
            sleep = action.startSleeper
        }
        #expect(starts.count == 40)
        Self.expectWithinRate(starts, burst: 3, rate: 4, "starts")
        #expect(starts.filter { $0 <= .seconds(1) }.count == 7, "the bound is reached: a full bucket, then a second")
        #expect(starts.filter { $0 <= .seconds(4) }.count == 3 + 4 * 4, "burst + startsPerSecond × T over T seconds")
    }

    // MARK: - Starts taken when a fetch leaves (a pool with a fleet's coordinator)

    /// The slots of a budget whose fetches take their start when they leave: admitted on a slot alone, as many at
    /// once as there are slots, in the same urgency order, and never waiting for time, so never a sleeper.
    @Test func aBudgetOfSlotsAloneAdmitsOnASlotAndNeverWaitsForTime() {
        var slots = Machine(slots: 2, now: .zero)
        let a = slots.start("a", at: .zero)!
        let b = slots.start("b", at: .zero)!
        #expect(slots.snapshot.inFlight == 2 && slots.snapshot.admitted == 2, "no bucket limits them")
        let renewal = slots.queue("renewal", .proactive, deadline: .seconds(60), at: .zero)
        let needed = slots.queue("needed", .needed, deadline: .seconds(90), at: .zero)
        #expect(!slots.sleeping, "they wait for a slot, not for time")
        #expect(slots.release(a, outcome: .answered, waited: .zero, at: .seconds(1)) == Action(resume: [needed.order]))
        #expect(slots.release(b, outcome: .outage, waited: .zero, at: .seconds(1)) == Action(resume: [renewal.order]))
        #expect(slots.probeAt == nil && slots.snapshot.outages == 0, "outages are the starts' to count")
        #expect(slots.start("c", at: .seconds(1)) == nil, "both slots are taken")
    }

    /// The budget of starts expects the slots' tickets, so that a caller who comes while the fetch waits for a slot
    /// or at the fleet makes it leave as needed; a ticket whose fetch never leaves is forgotten, promotion and all.
    @Test func anExpectedTicketCanBePromotedBeforeItLeavesAndIsForgottenIfItNeverDoes() {
        var slots = Machine(slots: 4, now: .zero)
        var starts = Self.machine(rate: 4, burst: 1)
        _ = starts.start("blocker", at: .zero)
        let renewal = slots.ticket(urgency: .proactive, deadline: .seconds(60), account: "renewal")
        let shared = slots.ticket(urgency: .proactive, deadline: .seconds(30), account: "shared")
        starts.expect(renewal)
        starts.expect(shared)
        starts.promote(renewal, at: .milliseconds(10))
        starts.promote(shared, at: .milliseconds(10))
        #expect(starts.promotedCount == 2)
        starts.forget(shared)
        #expect(starts.promotedCount == 1, "the fetch the fleet answered leaves nothing behind")
        let later = starts.queue("later", .needed, deadline: .milliseconds(20), at: .milliseconds(100))
        _ = starts.acquire(renewal, cancelled: false, at: .milliseconds(100))
        #expect(starts.snapshot.queuedNeeded == 2, "the promoted renewal leaves as needed")
        #expect(
            starts.sleeperFired(at: .milliseconds(250))
                == Action(resume: [renewal.order], startSleeper: .milliseconds(250)),
            "needed since its caller came, before a fetch needed later")
        #expect(starts.sleeperFired(at: .milliseconds(500)) == Action(resume: [later.order]))
    }

    // MARK: - The order of the queue

    @Test func aNeededFetchGoesBeforeAProactiveRenewal() {
        var machine = Self.machine(inFlight: 1)
        let blocker = machine.start("blocker", at: .zero)!
        let renewal = machine.queue("renewal", .proactive, deadline: .seconds(100), at: .zero)
        let signIn = machine.queue("sign-in", .needed, deadline: .seconds(200), at: .zero)
        #expect(machine.snapshot.queuedNeeded == 1 && machine.snapshot.queuedProactive == 1)
        #expect(
            machine.release(blocker, outcome: .answered, waited: .zero, at: .seconds(1))
                == Action(resume: [signIn.order]),
            "the renewal's deadline is still ahead, so it is not needed yet, however early it is")
        #expect(
            machine.release(signIn, outcome: .answered, waited: .zero, at: .seconds(2))
                == Action(resume: [renewal.order]))
    }

    @Test func theEarlierDeadlineGoesFirstThenTheEarlierArrival() {
        var machine = Self.machine(inFlight: 1)
        let blocker = machine.start("blocker", at: .zero)!
        let late = machine.queue("late", .needed, deadline: .seconds(10), at: .zero)
        let first = machine.queue("first", .needed, deadline: .seconds(5), at: .zero)
        let second = machine.queue("second", .needed, deadline: .seconds(5), at: .zero)
        var order: [UInt64] = []
        var running = blocker
        for ticket in [first, second, late] {
            order += machine.release(running, outcome: .answered, waited: .zero, at: .seconds(1)).resume
            running = ticket
        }
        #expect(order == [first.order, second.order, late.order])
    }

    @Test func aProactiveRenewalPastItsDeadlineGoesBeforeALaterNeededFetch() {
        var machine = Self.machine(inFlight: 1)
        let blocker = machine.start("blocker", at: .zero)!
        let renewal = machine.queue("renewal", .proactive, deadline: .seconds(10), at: .zero)
        let needed = machine.queue("needed", .needed, deadline: .seconds(20), at: .zero)
        let action = machine.release(blocker, outcome: .answered, waited: .zero, at: .seconds(15))
        #expect(action.resume == [renewal.order], "its credential expired while it waited: it is needed now")
        #expect(machine.release(renewal, outcome: .answered, waited: .zero, at: .seconds(16)).resume == [needed.order])

        // Past its deadline but later than the needed fetch's: the needed one keeps its place.
        var other = Self.machine(inFlight: 1)
        let otherBlocker = other.start("blocker", at: .zero)!
        _ = other.queue("renewal", .proactive, deadline: .seconds(10), at: .zero)
        let earlier = other.queue("needed", .needed, deadline: .seconds(8), at: .zero)
        #expect(
            other.release(otherBlocker, outcome: .answered, waited: .zero, at: .seconds(15)).resume == [earlier.order])
    }

    @Test func aCallerJoiningAQueuedProactiveRenewalPromotesItToNeeded() {
        var machine = Self.machine(inFlight: 1)
        let blocker = machine.start("blocker", at: .zero)!
        let signIn = machine.queue("sign-in", .needed, deadline: .seconds(50), at: .zero)
        let renewal = machine.queue("renewal", .proactive, deadline: .seconds(40), at: .zero)
        machine.promote(renewal, at: .zero)
        #expect(machine.snapshot.queuedNeeded == 2 && machine.snapshot.queuedProactive == 0)
        #expect(
            machine.release(blocker, outcome: .answered, waited: .zero, at: .seconds(1)).resume == [renewal.order],
            "needed now, with the earlier deadline")
        #expect(machine.release(renewal, outcome: .answered, waited: .zero, at: .seconds(2)).resume == [signIn.order])
        #expect(machine.snapshot.lateRenewals == 0, "a promoted renewal is needed, not late")
    }

    @Test func aTicketPromotedBeforeItsFetchQueuesQueuesAsNeeded() {
        var machine = Self.machine(inFlight: 1)
        _ = machine.start("blocker", at: .zero)
        let renewal = machine.ticket(urgency: .proactive, deadline: .seconds(40), account: "renewal")
        machine.promote(renewal, at: .zero)
        #expect(machine.acquire(renewal, cancelled: false, at: .zero) == .queued(Action()))
        #expect(machine.snapshot.queuedNeeded == 1 && machine.snapshot.queuedProactive == 0)
    }

    /// A promoted renewal is needed from its caller's arrival: it goes before the needed fetches that queued after
    /// the caller came, not at its credential's expiry, minutes later, behind every sign-in until then.
    @Test func aPromotedRenewalGoesAsNeededFromItsCallersArrival() {
        for promotedBeforeQueueing in [false, true] {
            var machine = Self.machine(inFlight: 1)
            var tickets: [UInt64: FetchBudget.Ticket] = [:]
            let blocker = machine.start("blocker", at: .zero)!
            let early = machine.queue("early", .needed, deadline: .seconds(10), at: .seconds(10))
            let renewal: FetchBudget.Ticket
            var expected = [early.order]
            if promotedBeforeQueueing {
                // The fetch asks to start only after another needed fetch queued; its caller came before that one.
                renewal = machine.ticket(urgency: .proactive, deadline: .seconds(300), account: "renewal")
                machine.promote(renewal, at: .seconds(20))
                let between = machine.queue("between", .needed, deadline: .seconds(25), at: .seconds(25))
                _ = machine.acquire(renewal, cancelled: false, at: .seconds(28))
                tickets[between.order] = between
                expected += [renewal.order, between.order]
            } else {
                renewal = machine.queue("renewal", .proactive, deadline: .seconds(300), at: .seconds(5))
                machine.promote(renewal, at: .seconds(20))
                expected += [renewal.order]
            }
            let late = machine.queue("late", .needed, deadline: .seconds(30), at: .seconds(30))
            expected += [late.order]
            for ticket in [early, renewal, late] { tickets[ticket.order] = ticket }
            var order: [UInt64] = []
            var finished = blocker
            for second in 40..<50 {
                let resumed = machine.release(finished, outcome: .answered, waited: .zero, at: .seconds(second)).resume
                order += resumed
                guard let next = resumed.first, let ticket = tickets[next] else { break }
                finished = ticket
            }
            #expect(order == expected, "promoted \(promotedBeforeQueueing ? "before" : "after") it queued")
        }
    }

    /// A caller that joins a renewal already admitted, or already over, promotes nothing and leaves nothing behind.
    @Test func promotingAFetchThatNoLongerWaitsChangesNothing() {
        var machine = Self.machine(inFlight: 1)
        let renewal = machine.ticket(urgency: .proactive, deadline: .seconds(40), account: "renewal")
        #expect(machine.acquire(renewal, cancelled: false, at: .zero) == .startNow)
        machine.promote(renewal, at: .seconds(1))
        _ = machine.release(renewal, outcome: .answered, waited: .zero, at: .seconds(2))
        machine.promote(renewal, at: .seconds(3))
        #expect(machine.promotedCount == 0)
    }

    @Test func aCancelledFetchLeavesTheQueueAndIsNeverAdmitted() {
        var machine = Self.machine(inFlight: 1)
        let blocker = machine.start("blocker", at: .zero)!
        let cancelled = machine.queue("cancelled", .needed, deadline: .zero, at: .zero)
        let waiting = machine.queue("waiting", .needed, deadline: .seconds(1), at: .zero)
        #expect(machine.cancel(cancelled) == .resumeCancelled(stopsSleeper: false))
        #expect(machine.snapshot.queuedNeeded == 1)
        #expect(machine.cancel(cancelled) == .none, "cancelled once")
        #expect(machine.release(blocker, outcome: .neither, waited: .zero, at: .seconds(1)).resume == [waiting.order])
        #expect(machine.cancel(waiting) == .none, "an admitted fetch is released, not cancelled")
        #expect(machine.release(waiting, outcome: .neither, waited: .zero, at: .seconds(2)) == Action())

        let early = machine.ticket(urgency: .needed, deadline: .zero, account: "early")
        #expect(
            machine.acquire(early, cancelled: true, at: .seconds(3)) == .resumeCancelled,
            "cancelled before it could queue")
        #expect(machine.snapshot.queuedNeeded == 0 && machine.snapshot.inFlight == 0)
    }

    // MARK: - The backend's pause

    @Test func aRetryAfterPausesEveryAccountThenOneProbeGoesThenTheRate() {
        var machine = Self.machine(inFlight: 10, rate: 4, burst: 4)
        let paused = machine.start("paused", at: .zero)!
        machine.pause(for: .seconds(30), at: .zero)
        machine.pause(for: .seconds(10), at: .seconds(1))
        #expect(machine.probeAt == .seconds(30), "a shorter pause does not shorten the one in force")
        #expect(machine.release(paused, outcome: .neither, waited: .zero, at: .seconds(1)) == Action())
        let b = machine.ticket(urgency: .needed, deadline: .zero, account: "b")
        #expect(
            machine.acquire(b, cancelled: false, at: .seconds(1)) == .queued(Action(startSleeper: .seconds(29))),
            "held though a slot and tokens are free, for every account")
        let c = machine.queue("c", .needed, deadline: .zero, at: .seconds(1))
        let d = machine.queue("d", .needed, deadline: .zero, at: .seconds(1))
        #expect(machine.sleeperFired(at: .seconds(30)) == Action(resume: [b.order]), "one probe, and no sleeper")
        #expect(machine.probing)
        let action = machine.release(b, outcome: .answered, waited: .seconds(29), at: .seconds(31))
        #expect(
            action == Action(resume: [c.order], startSleeper: .milliseconds(250)),
            "the answer ends the pause, and the others go at the rate")
        #expect(machine.probeAt == nil && machine.snapshot.outages == 0, "a pause is not an outage, and no report")
        #expect(machine.sleeperFired(at: .milliseconds(31_250)) == Action(resume: [d.order]))
    }

    @Test func aPauseOfNothingHoldsNothing() {
        var machine = Self.machine()
        machine.pause(for: .zero, at: .zero)
        #expect(machine.probeAt == nil)
        #expect(machine.start("a", at: .zero) != nil)
    }

    // MARK: - Outages

    @Test func anOutageBeginsOnlyAfterTheThresholdInARowFromEnoughAccounts() {
        var machine = Self.machine(burst: 10, outageThreshold: 4, outageAccounts: 3)
        for name in ["a", "a", "b", "b"] {
            let ticket = machine.start(AccountID(name), at: .zero)!
            #expect(machine.release(ticket, outcome: .outage, waited: .zero, at: .zero) == Action())
        }
        #expect(!machine.snapshot.holdsForOutage, "four in a row, but from two accounts")
        let c = machine.start("c", at: .zero)!
        #expect(machine.release(c, outcome: .outage, waited: .zero, at: .seconds(1)) == Action(report: [.began("c")]))
        #expect(machine.snapshot.holdsForOutage && machine.snapshot.outages == 1)
        #expect(machine.probeAt == .seconds(6), "the first probe an interval after the outage began")

        // A threshold below the accounts asked for needs only as many accounts as failures.
        var small = Self.machine(outageThreshold: 2, outageAccounts: 3)
        for name in ["a", "b"] {
            let ticket = small.start(AccountID(name), at: .zero)!
            _ = small.release(ticket, outcome: .outage, waited: .zero, at: .zero)
        }
        #expect(small.snapshot.holdsForOutage, "min(outageThreshold, outageAccounts) accounts")
    }

    @Test func anAnswerBetweenFailuresStartsTheCountAgain() {
        var machine = Self.machine(burst: 10, outageThreshold: 3, outageAccounts: 1)
        for (name, outcome) in [("a", FetchBudget.Outcome.outage), ("b", .outage), ("c", .answered), ("d", .outage)] {
            let ticket = machine.start(AccountID(name), at: .zero)!
            _ = machine.release(ticket, outcome: outcome, waited: .zero, at: .zero)
        }
        #expect(!machine.snapshot.holdsForOutage, "two in a row, then an answer, then one")
        let e = machine.start("e", at: .zero)!
        _ = machine.release(e, outcome: .neither, waited: .zero, at: .zero)
        let f = machine.start("f", at: .zero)!
        #expect(machine.release(f, outcome: .outage, waited: .zero, at: .zero) == Action())
        #expect(!machine.snapshot.holdsForOutage, "a fetch cancelled or paused neither counts nor resets: two")
        let g = machine.start("g", at: .zero)!
        #expect(machine.release(g, outcome: .outage, waited: .zero, at: .zero).report == [.began("g")])
    }

    @Test func withoutAThresholdTheBudgetNeverHolds() {
        var machine = Self.machine(inFlight: 100, burst: 100, outageThreshold: nil, outageAccounts: 1)
        for index in 0..<50 {
            let ticket = machine.start(AccountID("\(index % 5)"), at: .zero)!
            #expect(machine.release(ticket, outcome: .outage, waited: .zero, at: .zero) == Action())
        }
        #expect(!machine.snapshot.holdsForOutage && machine.probeAt == nil)
    }

    @Test func duringAnOutageOneProbeAtATimeGoesAtProbeTimes() {
        var machine = Self.outage(at: .zero)
        let x = machine.ticket(urgency: .needed, deadline: .zero, account: "x")
        #expect(machine.acquire(x, cancelled: false, at: .zero) == .queued(Action(startSleeper: .seconds(5))))
        let y = machine.queue("y", .needed, deadline: .zero, at: .zero)
        #expect(machine.sleeperFired(at: .seconds(5)) == Action(resume: [x.order]), "one probe, nothing else")
        let z = machine.ticket(urgency: .needed, deadline: .zero, account: "z")
        #expect(
            machine.acquire(z, cancelled: false, at: .seconds(60)) == .queued(Action()),
            "no second probe while one is at the backend, however long it takes")
        #expect(
            machine.release(x, outcome: .outage, waited: .seconds(5), at: .seconds(61))
                == Action(startSleeper: .seconds(5)),
            "the next probe an interval after this one failed")
        #expect(machine.sleeperFired(at: .seconds(66)) == Action(resume: [y.order]))
        #expect(machine.snapshot.holdsForOutage && machine.snapshot.outages == 1)
    }

    @Test func theNextProbeAvoidsTheAccountWhoseProbeFailedLast() {
        var machine = Self.outage(at: .zero)
        let failing = machine.queue("failing", .needed, deadline: .zero, at: .zero)
        let healthy = machine.queue("healthy", .proactive, deadline: .seconds(900), at: .zero)
        #expect(machine.sleeperFired(at: .seconds(5)).resume == [failing.order], "first in urgency order")
        _ = machine.release(failing, outcome: .outage, waited: .zero, at: .seconds(6))
        // The failing account retries at once, needed now: first in urgency order, and not the next probe.
        let retry = machine.queue("failing", .needed, deadline: .seconds(6), at: .seconds(6))
        #expect(machine.sleeperFired(at: .seconds(11)).resume == [healthy.order])
        _ = machine.release(healthy, outcome: .outage, waited: .zero, at: .seconds(12))
        #expect(
            machine.sleeperFired(at: .seconds(17)).resume == [retry.order],
            "the account whose probe failed last is now the other one")
        _ = machine.release(retry, outcome: .outage, waited: .zero, at: .seconds(18))
        let again = machine.queue("failing", .needed, deadline: .seconds(18), at: .seconds(18))
        #expect(
            machine.sleeperFired(at: .seconds(23)).resume == [again.order],
            "with no other account waiting, the same account probes")
    }

    @Test func anAnswerEndsTheHoldAndTheBucketHoldsOneStartThen() {
        var machine = Self.outage(at: .zero, burst: 10)
        let probe = machine.queue("probe", .needed, deadline: .zero, at: .zero)
        let held = (0..<5).map { machine.queue(AccountID("held-\($0)"), .needed, deadline: .seconds(1), at: .zero) }
        #expect(machine.sleeperFired(at: .seconds(5)).resume == [probe.order])
        #expect(machine.tokens > 1, "a quiet outage fills the bucket")
        let action = machine.release(probe, outcome: .answered, waited: .seconds(5), at: .seconds(6))
        #expect(action.report == [.ended("probe")])
        #expect(action.resume == [held[0].order], "one start, not the full bucket")
        #expect(action.startSleeper == .milliseconds(250), "the rest at the rate")
        #expect(!machine.snapshot.holdsForOutage && machine.probeAt == nil)
    }

    @Test func anAnswerFromAFetchInFlightEndsTheOutageToo() {
        var machine = Self.machine(outageThreshold: 3, outageAccounts: 3)
        let inFlight = machine.start("in-flight", at: .zero)!
        for name in ["a", "b", "c"] {
            let ticket = machine.start(AccountID(name), at: .zero)!
            _ = machine.release(ticket, outcome: .outage, waited: .zero, at: .zero)
        }
        #expect(machine.snapshot.holdsForOutage)
        let held = machine.queue("held", .needed, deadline: .zero, at: .zero)
        let action = machine.release(inFlight, outcome: .answered, waited: .zero, at: .seconds(1))
        #expect(action.report == [.ended("in-flight")] && action.resume == [held.order])
    }

    /// A sleeper set for a hold's end (the next probe, or the end of the backend's pause) gives way, when an answer
    /// ends the hold early, to one set for the budget's rate: the held fetches go a quarter of a second apart, not
    /// when the probe or the pause would have come.
    @Test(arguments: [false, true])
    func anAnswerThatEndsAHoldBringsTheSleeperForward(paused: Bool) {
        var machine = paused ? Self.machine() : Self.machine(outageThreshold: 3, outageAccounts: 3)
        let inFlight = machine.start("in-flight", at: .zero)!
        if paused {
            let asked = machine.start("asked", at: .zero)!
            machine.pause(for: .seconds(600), at: .zero)
            _ = machine.release(asked, outcome: .neither, waited: .zero, at: .zero)
        } else {
            for name in ["a", "b", "c"] {
                _ = machine.release(
                    machine.start(AccountID(name), at: .zero)!, outcome: .outage, waited: .zero, at: .zero)
            }
        }
        let held = (0..<3).map { machine.queue(AccountID("held-\($0)"), .needed, deadline: .zero, at: .zero) }
        #expect(machine.sleeping, "asleep until the hold's end")
        let action = machine.release(inFlight, outcome: .answered, waited: .zero, at: .seconds(1))
        #expect(action.resume == [held[0].order])
        #expect(action.stopSleeper, "the sleeper for the hold's end stops")
        #expect(action.startSleeper == .milliseconds(250), "and one wakes for the next token")
        #expect(machine.sleeperFired(at: .milliseconds(1250)).resume == [held[1].order])
    }

    /// A rate of one start in thirty thousand years, or a pause of thirty thousand years, asks for a sleeper of a day
    /// at most, which looks again when it wakes: a longer one would be no deadline in the deadline queue (it holds up
    /// to a year), and nothing would ever wake the queue.
    @Test func theSleeperSleepsADayAtMost() {
        var slow = Self.machine(rate: 1e-12, burst: 1)
        _ = slow.start("a", at: .zero)
        let b = slow.ticket(urgency: .needed, deadline: .zero, account: "b")
        #expect(slow.acquire(b, cancelled: false, at: .zero) == .queued(Action(startSleeper: .seconds(86_400))))
        #expect(slow.sleeperFired(at: .seconds(86_400)) == Action(startSleeper: .seconds(86_400)))

        var paused = Self.machine()
        paused.pause(for: .seconds(1e12), at: .zero)
        let c = paused.ticket(urgency: .needed, deadline: .zero, account: "c")
        #expect(paused.acquire(c, cancelled: false, at: .zero) == .queued(Action(startSleeper: .seconds(86_400))))
    }

    // MARK: - What it counts

    @Test func lateRenewalsAreCountedAndReportedOncePerBacklog() {
        var machine = Self.machine(inFlight: 1)
        let blocker = machine.start("blocker", at: .zero)!
        let first = machine.queue("first", .proactive, deadline: .seconds(1), at: .zero)
        let second = machine.queue("second", .proactive, deadline: .seconds(2), at: .zero)
        var action = machine.release(blocker, outcome: .answered, waited: .zero, at: .seconds(10))
        #expect(action == Action(resume: [first.order], report: [.behind("first")]))
        action = machine.release(first, outcome: .answered, waited: .zero, at: .seconds(11))
        #expect(action == Action(resume: [second.order]), "reported once for this backlog")
        #expect(machine.snapshot.lateRenewals == 2, "and each counted")

        // The queue emptied: the next backlog is reported again; a renewal on time is not late.
        let onTime = machine.queue("on-time", .proactive, deadline: .seconds(100), at: .seconds(11))
        let late = machine.queue("late", .proactive, deadline: .seconds(12), at: .seconds(11))
        action = machine.release(second, outcome: .answered, waited: .zero, at: .seconds(20))
        #expect(action == Action(resume: [late.order], report: [.behind("late")]))
        action = machine.release(late, outcome: .answered, waited: .zero, at: .seconds(21))
        #expect(action == Action(resume: [onTime.order]))
        #expect(machine.snapshot.lateRenewals == 3)
    }

    @Test func theBudgetsWaitIsRecordedAtEachRelease() {
        var machine = Self.machine(inFlight: 1)
        let a = machine.start("a", at: .zero)!
        let b = machine.queue("b", .needed, deadline: .zero, at: .zero)
        _ = machine.release(a, outcome: .answered, waited: .zero, at: .seconds(3))
        _ = machine.release(b, outcome: .outage, waited: .seconds(3), at: .seconds(4))
        #expect(machine.snapshot.waited.sorted() == [.zero, .seconds(3)])
        #expect(machine.snapshot.waits == 1 && machine.snapshot.admitted == 2)
    }
}

extension FetchBudgetStateMachineTests {
    /// Random inputs in random orders, every action checked against what the owner may do: resume only queued
    /// fetches, each once and never a cancelled one; start a sleeper only when none sleeps; keep the slots and the
    /// rate; one probe at a time while the budget holds; never leave a fetch queued with nothing to wake it. Then the
    /// backend answers every fetch, and every fetch not cancelled is admitted.
    @Test(arguments: 0..<64 as Range<UInt64>)
    func randomInputsKeepEveryRule(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let inFlightLimit = Int.random(in: 1...4, using: &random)
        let rate = [1.0, 2, 4, 8].randomElement(using: &random)!
        let burst = Int.random(in: 1...4, using: &random)
        var machine = Self.machine(
            inFlight: inFlightLimit, rate: rate, burst: burst,
            outageThreshold: [nil, 2, 3].randomElement(using: &random)!,
            outageAccounts: Int.random(in: 1...3, using: &random), probeInterval: .seconds(1))
        let accounts = (0..<6).map { AccountID("account-\($0)") }
        var now = Duration.zero
        var sleeperDue: Duration?
        var queued: [UInt64: FetchBudget.Ticket] = [:]
        var running: [UInt64: FetchBudget.Ticket] = [:]
        var cancelled: Set<UInt64> = []
        var starts: [Duration] = []
        var busy: Set<AccountID> = []

        func check(_ action: Action, probingBefore: Bool, sleepingBefore: Bool, step: String) {
            for order in action.resume {
                guard let ticket = queued.removeValue(forKey: order) else {
                    Issue.record(
                        "\(step): resumed \(order), which is not queued (cancelled: \(cancelled.contains(order)))")
                    continue
                }
                running[order] = ticket
                starts.append(now)
            }
            if action.stopSleeper {
                #expect(sleepingBefore, "\(step): stopped a sleeper that did not sleep")
                sleeperDue = nil
            }
            if let sleep = action.startSleeper {
                #expect(!sleepingBefore || action.stopSleeper, "\(step): a second sleeper")
                #expect(sleep > .zero)
                sleeperDue = now + sleep
            }
            if machine.probeAt != nil {
                #expect(action.resume.count <= (probingBefore ? 0 : 1), "\(step): one probe at a time")
            }
        }

        func checkState(_ step: String) {
            let snapshot = machine.snapshot
            #expect(snapshot.inFlight == running.count && snapshot.inFlight <= inFlightLimit, "\(step)")
            #expect(snapshot.queuedNeeded + snapshot.queuedProactive == queued.count, "\(step)")
            #expect(machine.sleeping == (sleeperDue != nil), "\(step)")
            if !queued.isEmpty, running.count < inFlightLimit, !machine.probing {
                #expect(machine.sleeping, "\(step): a queued fetch with nothing to wake it")
            }
            if queued.isEmpty {
                #expect(!machine.sleeping, "\(step): a sleeper with nothing waiting")
            }
            if !queued.isEmpty, running.count < inFlightLimit, machine.probeAt == nil, let due = sleeperDue {
                // Nothing holds the queue: the sleeper wakes by the next token, not later.
                let nextToken = now + .seconds(max(0, 1 - machine.tokens) / rate)
                #expect(
                    due <= nextToken + .microseconds(1),
                    "\(step): the sleeper wakes at \(due), the token is due at \(nextToken)")
            }
            // Every ticket here asks to start as it is made: a promotion never waits for one to queue.
            #expect(machine.promotedCount == 0, "\(step): a promotion left behind")
        }

        func release(_ order: UInt64, _ outcome: FetchBudget.Outcome) {
            guard let ticket = running.removeValue(forKey: order) else { return }
            busy.remove(ticket.account)
            let sleeping = machine.sleeping
            // The fetch released may be the probe, which frees the hold's one probe.
            let action = machine.release(ticket, outcome: outcome, waited: .zero, at: now)
            check(action, probingBefore: false, sleepingBefore: sleeping, step: "release \(outcome)")
        }

        func fire() {
            guard let due = sleeperDue else { return }
            now = max(now, due)
            sleeperDue = nil
            let probing = machine.probing
            check(machine.sleeperFired(at: now), probingBefore: probing, sleepingBefore: false, step: "sleeper")
        }

        for _ in 0..<300 {
            now += .milliseconds(Int64.random(in: 0...300, using: &random))
            if let due = sleeperDue, due <= now { fire() }
            switch Int.random(in: 0..<10, using: &random) {
            case 0...3:
                guard let account = accounts.filter({ !busy.contains($0) }).randomElement(using: &random) else { break }
                busy.insert(account)
                let urgency: FetchUrgency = Bool.random(using: &random) ? .needed : .proactive
                let ticket = machine.ticket(
                    urgency: urgency, deadline: now + .milliseconds(Int64.random(in: -500...3000, using: &random)),
                    account: account)
                let (probing, sleeping) = (machine.probing, machine.sleeping)
                switch machine.acquire(ticket, cancelled: false, at: now) {
                case .startNow:
                    #expect(queued.isEmpty, "started at once past a queue")
                    running[ticket.order] = ticket
                    starts.append(now)
                case .queued(let action):
                    queued[ticket.order] = ticket
                    check(action, probingBefore: probing, sleepingBefore: sleeping, step: "acquire")
                case .resumeCancelled:
                    Issue.record("not cancelled")
                }
            case 4...6:
                guard let order = running.keys.randomElement(using: &random) else { break }
                release(order, [.answered, .outage, .outage, .neither].randomElement(using: &random)!)
            case 7:
                guard let order = queued.keys.randomElement(using: &random) else { break }
                let ticket = queued.removeValue(forKey: order)!
                guard case .resumeCancelled(let stopsSleeper) = machine.cancel(ticket) else {
                    Issue.record("a queued fetch's cancellation resumed nothing")
                    break
                }
                if stopsSleeper {
                    #expect(queued.isEmpty && sleeperDue != nil, "stopped a sleeper that was needed, or none")
                    sleeperDue = nil
                }
                cancelled.insert(order)
                busy.remove(ticket.account)
            case 8:
                guard let ticket = (Array(queued.values) + Array(running.values)).randomElement(using: &random) else {
                    break
                }
                machine.promote(ticket, at: now)
            default:
                machine.pause(for: .milliseconds(Int64.random(in: 0...2000, using: &random)), at: now)
            }
            checkState("step")
        }
        // The backend answers from now on: every fetch still queued is admitted.
        var rounds = 0
        while !queued.isEmpty || !running.isEmpty, rounds < 10_000 {
            rounds += 1
            if let order = running.keys.min() {
                release(order, .answered)
            } else {
                fire()
            }
            checkState("drain")
        }
        #expect(queued.isEmpty && running.isEmpty, "every fetch not cancelled was admitted and released")
        Self.expectWithinRate(starts, burst: burst, rate: rate, "starts")
    }

    /// Expects at most `burst + rate` of `instants` in the second from each of them.
    static func expectWithinRate(_ instants: [Duration], burst: Int, rate: Double, _ what: String) {
        for start in instants {
            let inOneSecond = instants.filter { $0 >= start && $0 <= start + .seconds(1) }.count
            #expect(Double(inOneSecond) <= Double(burst) + rate, "\(what) in the second from \(start)")
        }
    }

    /// A coordinated pool's budget as its owner drives it, with random inputs: slots given in urgency order, fetches
    /// the fleet answers (their start forgotten) or lets go (they wait for a start), fetches cancelled while they wait
    /// to leave, promotions at any stage, pauses, outages. The slots never wait for time and bound every fetch past
    /// admission; the starts bound what leaves to `burst + startsPerSecond` in any second, whatever the fleet let go
    /// together; no fetch waiting to leave is left with nothing to wake it; and once the backend answers, every fetch
    /// leaves, and neither machine keeps a promotion or a fetch.
    @Test(arguments: 0..<32 as Range<UInt64>)
    func randomInputsThroughSlotsAndStartsKeepBothBounds(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let slotLimit = Int.random(in: 1...4, using: &random)
        let rate = [1.0, 2, 4, 8].randomElement(using: &random)!
        let burst = Int.random(in: 1...3, using: &random)
        var slots = Machine(slots: slotLimit, now: .zero)
        var starts = Self.machine(
            inFlight: slotLimit, rate: rate, burst: burst, outageThreshold: [nil, 2].randomElement(using: &random)!,
            outageAccounts: 1, probeInterval: .seconds(1))
        var now = Duration.zero
        var sleeperDue: Duration?
        var waitingForSlot: [UInt64: FetchBudget.Ticket] = [:]
        var atFleet: [UInt64: FetchBudget.Ticket] = [:]
        var waitingToLeave: [UInt64: FetchBudget.Ticket] = [:]
        var left: [UInt64: FetchBudget.Ticket] = [:]
        var leaves: [Duration] = []
        var nextAccount = 0

        func slotsDid(_ action: Action, _ step: String) {
            #expect(action.startSleeper == nil, "\(step): the slots wait for nothing but a slot")
            #expect(action.report.allSatisfy { if case .behind = $0 { true } else { false } }, "\(step): \(action)")
            for order in action.resume {
                guard let ticket = waitingForSlot.removeValue(forKey: order) else {
                    Issue.record("\(step): a slot for \(order), which did not wait for one")
                    continue
                }
                atFleet[order] = ticket
            }
        }
        func startsDid(_ action: Action, _ step: String) {
            if action.stopSleeper { sleeperDue = nil }
            if let sleep = action.startSleeper { sleeperDue = now + sleep }
            for order in action.resume {
                guard let ticket = waitingToLeave.removeValue(forKey: order) else {
                    Issue.record("\(step): a start for \(order), which did not wait to leave")
                    continue
                }
                left[order] = ticket
                leaves.append(now)
            }
        }
        func freeSlot(_ ticket: FetchBudget.Ticket, _ step: String) {
            slotsDid(slots.release(ticket, outcome: .neither, waited: .zero, at: now), step)
        }
        func leave(_ ticket: FetchBudget.Ticket) {
            switch starts.acquire(ticket, cancelled: false, at: now) {
            case .startNow:
                left[ticket.order] = ticket
                leaves.append(now)
            case .queued(let action):
                waitingToLeave[ticket.order] = ticket
                startsDid(action, "leave")
            case .resumeCancelled:
                Issue.record("not cancelled")
            }
        }
        func end(_ order: UInt64, _ outcome: FetchBudget.Outcome) {
            let ticket = left.removeValue(forKey: order)!
            startsDid(starts.release(ticket, outcome: outcome, waited: .zero, at: now), "release")
            freeSlot(ticket, "release")
        }
        func fire() {
            guard let due = sleeperDue else { return }
            now = max(now, due)
            sleeperDue = nil
            startsDid(starts.sleeperFired(at: now), "sleeper")
        }
        func checkState(_ step: String) {
            #expect(!slots.sleeping, "\(step)")
            let pastAdmission = atFleet.count + waitingToLeave.count + left.count
            #expect(slots.snapshot.inFlight == pastAdmission && pastAdmission <= slotLimit, "\(step)")
            #expect(starts.snapshot.inFlight == left.count, "\(step)")
            if !waitingToLeave.isEmpty, !starts.probing {
                #expect(starts.sleeping, "\(step): a fetch waits to leave with nothing to wake it")
            }
        }

        for _ in 0..<300 {
            now += .milliseconds(Int64.random(in: 0...300, using: &random))
            if let due = sleeperDue, due <= now { fire() }
            switch Int.random(in: 0..<11, using: &random) {
            case 0...2:
                nextAccount += 1
                let ticket = slots.ticket(
                    urgency: Bool.random(using: &random) ? .needed : .proactive,
                    deadline: now + .milliseconds(Int64.random(in: -500...3000, using: &random)),
                    account: AccountID("account-\(nextAccount)"))
                starts.expect(ticket)
                switch slots.acquire(ticket, cancelled: false, at: now) {
                case .startNow: atFleet[ticket.order] = ticket
                case .queued(let action):
                    waitingForSlot[ticket.order] = ticket
                    slotsDid(action, "acquire")
                case .resumeCancelled: Issue.record("not cancelled")
                }
            case 3:
                // Another replica's credential answers it: no start is taken.
                guard let order = atFleet.keys.randomElement(using: &random) else { break }
                let ticket = atFleet.removeValue(forKey: order)!
                starts.forget(ticket)
                freeSlot(ticket, "share")
            case 4...5:
                // The fleet lets go of every fetch it held, together.
                for order in atFleet.keys.sorted() { leave(atFleet.removeValue(forKey: order)!) }
            case 6...7:
                guard let order = left.keys.randomElement(using: &random) else { break }
                end(order, [.answered, .outage, .neither].randomElement(using: &random)!)
            case 8:
                guard let order = waitingToLeave.keys.randomElement(using: &random) else { break }
                let ticket = waitingToLeave.removeValue(forKey: order)!
                guard case .resumeCancelled(let stopsSleeper) = starts.cancel(ticket) else {
                    Issue.record("a fetch waiting to leave was not cancelled")
                    break
                }
                if stopsSleeper { sleeperDue = nil }
                freeSlot(ticket, "cancel")
            case 9:
                let all = Array(waitingForSlot.values) + Array(atFleet.values) + Array(waitingToLeave.values)
                guard let ticket = all.randomElement(using: &random) else { break }
                slots.promote(ticket, at: now)
                starts.promote(ticket, at: now)
            default:
                starts.pause(for: .milliseconds(Int64.random(in: 0...2000, using: &random)), at: now)
            }
            checkState("step")
        }
        // The fleet lets every fetch go and the backend answers: every fetch leaves.
        var rounds = 0
        while !(waitingForSlot.isEmpty && atFleet.isEmpty && waitingToLeave.isEmpty && left.isEmpty), rounds < 10_000 {
            rounds += 1
            for order in atFleet.keys.sorted() { leave(atFleet.removeValue(forKey: order)!) }
            if let order = left.keys.min() {
                end(order, .answered)
            } else {
                fire()
            }
            checkState("drain")
        }
        #expect(waitingForSlot.isEmpty && waitingToLeave.isEmpty && left.isEmpty, "every fetch left and ended")
        #expect(slots.promotedCount == 0 && starts.promotedCount == 0, "no promotion kept")
        Self.expectWithinRate(leaves, burst: burst, rate: rate, "leaves")
    }

    /// A budget holding for an outage that began at `now` (three accounts' fetches failed), its bucket full again.
    static func outage(at now: Duration, burst: Int = 4) -> Machine {
        var machine = Self.machine(burst: burst, outageThreshold: 3, outageAccounts: 3)
        for name in ["a", "b", "c"] {
            let ticket = machine.start(AccountID(name), at: now)!
            _ = machine.release(ticket, outcome: .outage, waited: .zero, at: now)
        }
        precondition(machine.snapshot.holdsForOutage)
        return machine
    }
}

extension FetchBudget.StateMachine {
    /// A needed fetch for `account` that starts at once, or `nil` when it queued.
    @discardableResult
    mutating func start(_ account: AccountID, at now: Duration) -> FetchBudget.Ticket? {
        let ticket = ticket(urgency: .needed, deadline: now, account: account)
        return acquire(ticket, cancelled: false, at: now) == .startNow ? ticket : nil
    }

    /// A fetch for `account` that queues; nothing it admits or asks for is checked.
    mutating func queue(
        _ account: AccountID, _ urgency: FetchUrgency, deadline: Duration, at now: Duration
    ) -> FetchBudget.Ticket {
        let ticket = ticket(urgency: urgency, deadline: deadline, account: account)
        _ = acquire(ticket, cancelled: false, at: now)
        return ticket
    }
}
